// Element types the runtime moves and reduces (fp32, fp16, bf16), their sizes and names, and
// exact scalar conversions (round to nearest even, NaN kept quiet, overflow to infinity as the
// hardware converters do). SIMD conversions live next to the kernels that need them and are
// tested against these. Pure functions; thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zrt {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

constexpr std::size_t dtypeSize(DType t) { return t == DType::F32 ? 4 : 2; }
std::string_view nameOf(DType t);
// "fp32"/"float32"/"f32", "fp16"/"float16"/"half", "bf16"/"bfloat16"; throws InvalidArgument.
DType parseDType(std::string_view name);

// IEEE binary16 and bfloat16 stored as their bit patterns.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

inline float bf16ToFloat(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t floatToBf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float halfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal half: normalise into a float
      int e = -1;
      std::uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(u);
}

inline std::uint16_t floatToHalf(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  if (absu >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absu < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (absu < 0x33000000u) return sign;  // below half of the smallest subnormal
    const std::uint32_t exp = absu >> 23;
    const std::uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... aligns to 2^-24 units
    const std::uint32_t half = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    std::uint32_t r = half + ((rem > mid || (rem == mid && (half & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t v = absu - 0x38000000u;  // rebias exponent from 127 to 15
  v += 0xfffu + ((v >> 13) & 1u);        // round to nearest, ties to even
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

}  // namespace zrt
