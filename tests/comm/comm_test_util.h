// Helpers shared by the comm tests: deterministic per-rank inputs (so every rank can compute
// every peer's data and a float64 reference locally), typed buffers, and the tolerance of a sum
// rounded in fp32/fp16/bf16 steps.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/element_arithmetic.h"
#include "core/dtype.h"

namespace zrt::test {

// A buffer of `n` elements of `dtype`.
struct Buf {
  DType dtype = DType::F32;
  std::vector<char> bytes;
  Buf() = default;
  Buf(DType t, std::size_t n, float fill = 0.f) : dtype(t), bytes(n * dtypeSize(t)) {
    for (std::size_t i = 0; i < n; ++i) set(i, fill);
  }
  std::size_t size() const { return bytes.size() / dtypeSize(dtype); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  float get(std::size_t i) const { return zrt::loadElement(dtype, bytes.data(), i); }
  void set(std::size_t i, float v) { zrt::storeElement(dtype, bytes.data(), i, v); }
};

// Small integers: every partial sum over up to 8 ranks is exact in bf16, fp16 and fp32, so any
// summation order gives the same bits.
inline float exactValue(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 29) - 14);
}

// The sum over ranks 0..world-1 of exactValue(r, i): every partial sum is exact.
inline float exactSum(int world, std::size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += exactValue(r, i);
  return s;
}

// Rank `rank`'s exact inputs (exactValue(rank, first + i)) and their sums over the world.
struct ExactData {
  Buf in, sum;
};
inline ExactData exactData(DType dtype, std::size_t n, int rank, int world, std::size_t first = 0) {
  ExactData d{Buf(dtype, n), Buf(dtype, n)};
  for (std::size_t i = 0; i < n; ++i) {
    d.in.set(i, exactValue(rank, first + i));
    d.sum.set(i, exactSum(world, first + i));
  }
  return d;
}

// A pseudo-random value in [-1, 1) that rounds exactly to `dtype` (it is stored in the buffer).
inline float randomValue(int rank, std::size_t i, DType dtype) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  const float v = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24)) * 2.f - 1.f;
  Buf b(dtype, 1);
  b.set(0, v);
  return b.get(0);
}

inline double unitRoundoff(DType t) {
  return t == DType::F32 ? std::ldexp(1.0, -24) : t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Bound on |computed - exact| for a sum of n terms with absolute sum `absSum`, rounded at most
// n times (pairwise MPI steps), each step a relative error of one unit roundoff.
inline double sumTolerance(DType t, int n, double absSum, double exact) {
  return (n + 1) * unitRoundoff(t) * (absSum + std::fabs(exact)) + 1e-30;
}

}  // namespace zrt::test
