// This rank's share of the global gradient norm: a sum of squares in double and whether any
// element is inf or NaN, added up over ranks in rank order (so every rank gets the same bits).
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zrt {

// Two floats' worth of doubles, sent as they are in one all-gather.
struct NormPart {
  double sumSq = 0;
  double nonFinite = 0;
};

// The sum of squares of `count` elements of type `t` at `base`, with the same bits whatever
// the thread count.
NormPart normPart(DType t, const void* base, std::size_t count);

}  // namespace zrt
