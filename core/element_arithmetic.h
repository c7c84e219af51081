// Element arithmetic on flat buffers of fp32, fp16 and bf16, for the collectives' reductions, the
// gradients' accumulation over micro-steps and the checkpoints' conversions: sums that
// accumulate in fp32 and round once to the element type, and the exact averaging step (division
// by an integer divisor in fp32, one rounding). AVX2+F16C when the CPU has them, a scalar path
// otherwise; both give bit-identical results (round to nearest even, as core/dtype.h).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zrt {

// dst[i] = srcs[0][i] + srcs[1][i] + ... + srcs[n-1][i], added in that order in fp32 and
// rounded once. dst may be one of the sources (same elements) but must not partly overlap one.
void sumInto(DType dtype, void* dst, const void* const* srcs, int nsrc, std::size_t count);

// inout[i] = in[i] + inout[i] in fp32, rounded once: the body of ZRT's MPI reduction ops.
void sumPair(DType dtype, const void* in, void* inout, std::size_t count);

// buf[i] = buf[i] / divisor in fp32, rounded once. Dividing (never multiplying by a rounded
// reciprocal, never pre-scaling the inputs) keeps an average of equal values exact.
void divideBy(DType dtype, void* buf, std::size_t count, float divisor);

// dst[i] = dst[i] + src[i] / divisor in fp32, rounded once (gradient accumulation into a shard).
void addDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor);

// acc[i] = x[i] (add: acc[i] = acc[i] + x[i]), x of type `t` widened to fp32: micro-steps'
// gradients summed in fp32.
void widenInto(DType t, const void* x, float* acc, std::size_t count, bool add);

// The value of element i as a float / storing a float with one rounding (tests, checks).
float loadElement(DType dtype, const void* buf, std::size_t i);
void storeElement(DType dtype, void* buf, std::size_t i, float value);

}  // namespace zrt
