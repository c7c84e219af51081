// Bulk conversions between fp32 and fp32/fp16/bf16 on a chosen CPU path, through exactly the
// load and store routines the optimizer kernels use for gradients and parameter copies. They
// give the same bits as core/dtype.h's scalar conversions on every path (tests check every
// fp16/bf16 bit pattern), so a caller may use them for casts of their own as well.
// Single-threaded; thread-safe for disjoint buffers.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "runtime/optim/isa.h"

namespace zrt::optim {

// out[i] = float(in[i]) for n elements of type `from`.
void convertToFloat(DType from, const void* in, float* out, std::size_t n, Isa isa = Isa::Auto);
// out[i] = `to`(in[i]), round to nearest even, for n elements.
void convertFromFloat(DType to, const float* in, void* out, std::size_t n, Isa isa = Isa::Auto);

}  // namespace zrt::optim
