// core/dtype.h's conversions for CUDA kernels: fp16 and bf16 widen exactly, and narrowing
// mirrors its integer round-to-nearest-even algorithms, so a kernel stores the bits the CPU
// paths store. Shared by every .cu file that reads or writes 16-bit elements.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace zrt::cuda_dtype {

template <DType T>
__device__ __forceinline__ float load(const void* base, std::int64_t i) {
  if constexpr (T == DType::F32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (T == DType::F16) {
    return __half2float(static_cast<const __half*>(base)[i]);  // exact widening
  } else {
    const std::uint32_t h = static_cast<const std::uint16_t*>(base)[i];
    return __uint_as_float(h << 16);
  }
}

// core/dtype.h floatToHalf.
__device__ __forceinline__ std::uint16_t toHalfBits(float f) {
  const std::uint32_t u = __float_as_uint(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u)
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  if (absu >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (absu < 0x38800000u) {
    if (absu < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exp = absu >> 23;
    const std::uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;
    const std::uint32_t half = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    const std::uint32_t r = half + ((rem > mid || (rem == mid && (half & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t v = absu - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

// core/dtype.h floatToBf16.
__device__ __forceinline__ std::uint16_t toBf16Bits(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

template <DType T>
__device__ __forceinline__ void store(void* base, std::int64_t i, float v) {
  if constexpr (T == DType::F32) {
    static_cast<float*>(base)[i] = v;
  } else if constexpr (T == DType::F16) {
    static_cast<std::uint16_t*>(base)[i] = toHalfBits(v);
  } else {
    static_cast<std::uint16_t*>(base)[i] = toBf16Bits(v);
  }
}

}  // namespace zrt::cuda_dtype
