// cuBLAS's fp32 GEMM rate at one shape, through the reference trainer's own CublasGemm (the same
// handle set-up and math mode, plain fp32 without TF32, as its layers use): the bar zrt-train's
// model FLOP rate on a GPU is held against. One thread at a time.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace zrt::gpubench {

struct GemmShape {
  int m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * m * n * k; }
};

class GemmRate {
 public:
  // `repeats` products a turn, so that a turn lasts long enough to time from the host.
  GemmRate(Device& device, GemmShape shape, int repeats);
  ~GemmRate();
  GemmRate(const GemmRate&) = delete;
  GemmRate& operator=(const GemmRate&) = delete;

  // Seconds for one turn's `repeats` products.
  double turn();
  // The first element of the product against its float64 value: throws ExternalError when they
  // differ by more than fp32 accumulation can, so a rate is never reported for a product that
  // did not happen.
  void verify();
  double flopsPerTurn() const { return shape_.flops() * repeats_; }
  const GemmShape& shape() const { return shape_; }

 private:
  struct Impl;
  GemmShape shape_;
  int repeats_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zrt::gpubench
