// Helpers shared by the optimizer tests: seeded random data in every gradient dtype, state
// snapshots compared bit for bit, and the float64 reference formulas.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zrt::optim::test {

// A gradient buffer in any dtype, plus its exact float values.
struct GradBuffer {
  DType type = DType::F32;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;

  const void* data() const {
    return type == DType::F32 ? static_cast<const void*>(f32.data())
                              : static_cast<const void*>(h16.data());
  }
  // The exact value the kernels see for element i.
  double value(std::size_t i) const {
    switch (type) {
      case DType::F32:
        return f32[i];
      case DType::F16:
        return halfToFloat(h16[i]);
      case DType::BF16:
        return bf16ToFloat(h16[i]);
    }
    return 0;
  }
};

// n gradients ~ N(0, sigma) (rounded to `type`), with a few zeros, subnormal-sized and
// larger values mixed in.
inline GradBuffer randomGrads(DType type, std::size_t n, std::uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(sigma));
  GradBuffer g;
  g.type = type;
  if (type == DType::F32)
    g.f32.resize(n);
  else
    g.h16.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    float x = normal(rng);
    if (i % 97 == 5) x = 0.0f;
    if (i % 101 == 7) x *= 1e-6f;  // fp16 subnormal range once scaled
    if (i % 103 == 11) x *= 30.0f;
    switch (type) {
      case DType::F32:
        g.f32[i] = x;
        break;
      case DType::F16:
        g.h16[i] = floatToHalf(x);
        break;
      case DType::BF16:
        g.h16[i] = floatToBf16(x);
        break;
    }
  }
  return g;
}

inline std::vector<float> randomFloats(std::size_t n, std::uint64_t seed, float mean, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(mean, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

inline std::string hex(std::uint32_t u) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(u >> shift) & 0xf];
  return s;
}

// Bitwise equality of two buffers; on a mismatch says where and what.
inline std::string firstDifference(const void* a, const void* b, std::size_t n,
                                   std::size_t elemBytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(x + i * elemBytes, y + i * elemBytes, elemBytes) != 0) {
      std::uint32_t u = 0, v = 0;
      std::memcpy(&u, x + i * elemBytes, elemBytes);
      std::memcpy(&v, y + i * elemBytes, elemBytes);
      return "element " + std::to_string(i) + ": bits 0x" + hex(u) + " vs 0x" + hex(v);
    }
  }
  return "";
}

}  // namespace zrt::optim::test
