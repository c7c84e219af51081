// Products and sums of sizes for zrt-plan's formulas that throw instead of wrapping: absurd
// inputs (a hidden size of 1e12, a sequence of 1e9 tokens) must give an error naming what
// overflowed, not a small, wrong byte count. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "core/error.h"

namespace zrt::plan {

// The product of `factors`; InvalidArgument saying `what` overflowed 64 bits.
inline std::uint64_t checkedProduct(std::initializer_list<std::uint64_t> factors,
                                    std::string_view what) {
  std::uint64_t out = 1;
  for (std::uint64_t f : factors) {
    if (__builtin_mul_overflow(out, f, &out))
      ZRT_THROW(InvalidArgument, what, " overflows 64 bits: the sizes given are too large");
  }
  return out;
}

// The sum of `terms`; InvalidArgument saying `what` overflowed 64 bits.
inline std::uint64_t checkedSum(std::initializer_list<std::uint64_t> terms, std::string_view what) {
  std::uint64_t out = 0;
  for (std::uint64_t t : terms) {
    if (__builtin_add_overflow(out, t, &out))
      ZRT_THROW(InvalidArgument, what, " overflows 64 bits: the sizes given are too large");
  }
  return out;
}

}  // namespace zrt::plan
