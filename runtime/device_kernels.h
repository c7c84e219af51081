// The runtime's arithmetic on device memory as launches of core/elementwise.h's kernels, queued
// on a stream and never run on the caller's thread over device pointers: the Adam and SGD steps
// with the coefficients runtime/optim computes (so a launch stores adamStep's and sgdStep's
// bits), and this rank's share
// of the gradient norm (runtime/grad_norm.h's NormPart, with normPart's bits).
// Thread-safety: as Device and Stream; a DeviceNormPart is one caller's.
#pragma once

#include <cstddef>

#include "core/device.h"
#include "core/elementwise.h"
#include "runtime/grad_norm.h"
#include "runtime/optim/adam.h"
#include "runtime/optim/sgd.h"

namespace zrt {

// runtime/optim's coefficients as the kernel takes them.
AdamStepCoeffs deviceAdamCoeffs(const optim::AdamCoeffs& c);

// Queues one Adam/AdamW step (hyperparameters as optim::adamStep) over `s`'s arrays, all in
// device memory, elements [offset, offset + count). Throws InvalidArgument on a bad
// hyperparameter, as adamStep.
void launchAdamStep(Device& device, Stream& stream, const optim::AdamHyper& h,
                    const optim::AdamState& s, std::size_t offset, std::size_t count);

// runtime/optim's SGD coefficients as the kernel takes them.
SgdStepCoeffs deviceSgdCoeffs(const optim::SgdCoeffs& c);

// Queues one SGD step (hyperparameters as optim::sgdStep) over `s`'s arrays, all in device
// memory, elements [offset, offset + count). Throws InvalidArgument on a bad hyperparameter or a
// missing momentum buffer, as sgdStep.
void launchSgdStep(Device& device, Stream& stream, const optim::SgdHyper& h,
                   const optim::SgdState& s, std::size_t offset, std::size_t count);

// This rank's share of the norm over gradients in device memory: the partial sums and their
// reduction are queued on a stream into a small device buffer of its own, and read back through
// a pinned one once the stream has run them.
class DeviceNormPart {
 public:
  // Room for the partial sums of up to `maxCount` elements.
  DeviceNormPart(Device& device, std::size_t maxCount);
  // Queues the sums over `count` elements of type t at `data` (device memory) on `stream`.
  void launch(Stream& stream, DType t, const void* data, std::size_t count);
  // Copies the result down and waits for `stream` (what the all-gather of the parts needs).
  NormPart take(Stream& stream);

 private:
  Device& device_;
  std::size_t maxChunks_;
  DeviceMemory sums_;    // the chunks' partial sums, then {sumSq, nonFinite} after them
  DeviceMemory pinned_;  // the two doubles, read by the host
};

}  // namespace zrt
