// Internal: the per-path kernel entry points. Each kernels_<path>.cpp is compiled with its own
// instruction-set flags and defines that path's functions; the rest of the library is built for
// baseline x86-64 and calls a path only after resolveIsa() found the processor supports it.
// A kernel updates elements [begin, end) of the arrays, single-threaded; callers split ranges
// among threads. Thread-safe for disjoint ranges.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/kernel_args.h"

namespace zrt::optim::detail {

using AdamKernelFn = void (*)(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin,
                              std::size_t end);
using SgdKernelFn = void (*)(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin,
                             std::size_t end);
// Reads and writes exactly what adam kernels read and write, with no arithmetic.
using RooflineKernelFn = void (*)(const AdamArrays& a, std::size_t begin, std::size_t end);
using ToFloatFn = void (*)(DType from, const void* in, float* out, std::size_t n);
using FromFloatFn = void (*)(DType to, const float* in, void* out, std::size_t n);

struct KernelTable {
  AdamKernelFn adam;
  SgdKernelFn sgd;
  RooflineKernelFn roofline;
  ToFloatFn toFloat;
  FromFloatFn fromFloat;
};

// The table of a resolved (concrete, supported) path.
const KernelTable& kernelsFor(Isa isa);

void adamScalar(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end);
void sgdScalar(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end);
void rooflineScalar(const AdamArrays& a, std::size_t begin, std::size_t end);
void toFloatScalar(DType from, const void* in, float* out, std::size_t n);
void fromFloatScalar(DType to, const float* in, void* out, std::size_t n);

void adamAvx2(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end);
void sgdAvx2(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end);
void rooflineAvx2(const AdamArrays& a, std::size_t begin, std::size_t end);
void toFloatAvx2(DType from, const void* in, float* out, std::size_t n);
void fromFloatAvx2(DType to, const float* in, void* out, std::size_t n);

void adamAvx512(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end);
void sgdAvx512(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end);
void rooflineAvx512(const AdamArrays& a, std::size_t begin, std::size_t end);
void toFloatAvx512(DType from, const void* in, float* out, std::size_t n);
void fromFloatAvx512(DType to, const float* in, void* out, std::size_t n);

}  // namespace zrt::optim::detail
