// The CUDA AdamW step (runtime/optim/cuda_adam.h) against a device-to-device copy of the bytes
// the step must move: it reads param, grad, exp_avg and exp_avg_sq and writes param, exp_avg and
// exp_avg_sq (plus the parameter copy when there is one), 28 bytes a parameter with fp32
// gradients; a cudaMemcpyAsync of half that many bytes reads and writes as many. The copy is the
// fastest the step's memory traffic can go on this GPU, so its time over the step's is the
// fraction of that speed the kernel reaches. One thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "core/device.h"
#include "core/dtype.h"
#include "runtime/optim/adam.h"
#include "tools/gpu-bench/pinned_copies.h"

namespace zrt::gpubench {

class AdamVsCopy {
 public:
  // `params` parameters in one tensor; `copyType` set: the step also writes a parameter copy.
  AdamVsCopy(Device& device, std::size_t params, DType gradType, std::optional<DType> copyType);

  PairedSeconds turn();
  // The first parameter after the steps taken so far against a float64 AdamW from the same start
  // (a constant gradient, so the formula is short): throws ExternalError past fp32 rounding, so
  // a rate is never reported for a step that did not compute.
  void verify();
  // The bytes one step reads and writes (what the copy moves, counting read and write).
  std::size_t bytesMoved() const { return bytesPerParam_ * params_; }
  std::size_t params() const { return params_; }

 private:
  Device& device_;
  std::size_t params_;
  DType gradType_;
  std::optional<DType> copyType_;
  std::size_t bytesPerParam_;
  optim::AdamHyper hyper_;
  DeviceMemory param_, expAvg_, expAvgSq_, grad_, paramCopy_, copyFrom_, copyTo_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace zrt::gpubench
