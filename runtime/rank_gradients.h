// The one owner of a rank's gradients: the workspace the caller writes a module's gradients
// into, their accumulation over the micro-steps of a step, the buckets that reduce them
// (comm/gradient_bucketer.h) and this rank's share of the global norm; at the step it hands the
// optimizer this rank's shard. Which of the model states' gradient buffers a gradient passes
// through is its GradientPolicy's business (runtime/stage_policy.h), so the Engine asks here,
// never the buffers themselves.
// Thread-safety: as the Engine: the training loop's thread only.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/gradient_bucketer.h"
#include "core/device.h"
#include "partition/model_states.h"
#include "runtime/device_kernels.h"
#include "runtime/engine_layout.h"
#include "runtime/grad_norm.h"
#include "runtime/stage_policy.h"

namespace zrt {

class RankGradients {
 public:
  // Allocates the workspace (the widest module's trainable gradients) on `device`. Where the
  // host cannot touch device memory, the accumulation and the norm run as kernels on a stream
  // of its own.
  RankGradients(Device& device, const ModelLayout& layout, const ModelStates& states, DType dtype,
                const ShardRange& normShard, std::unique_ptr<GradientPolicy> policy);
  ~RankGradients();

  // Where the buckets reduce to (their output), and the buckets, built after every rank's
  // set-up succeeded (collective); none when nothing trains.
  void* reduceTarget() const { return b_.reduced; }
  void connect(std::unique_ptr<comm::GradientBucketer> bucketer);

  // A micro-step: micro-step `micro` of `accumulation` begins, the caller writes parameter p's
  // gradient at home(p), modules report in backward order, and end() waits for the reduction.
  void begin(int micro, int accumulation);
  char* home(const ParamInfo& p) const { return policy_->home(p, b_); }
  void finished(std::size_t module);
  // The same, with parameter k of the module (registration order) read from from[k] instead of
  // home(p) where from[k] is not null: the caller's own buffer, read before this returns, which
  // saves it the copy into home(p).
  void finished(std::size_t module, const std::vector<const void*>& from);
  // Module `module` never reported: zeros travel in its place, so every rank posts the same
  // collectives.
  void missing(std::size_t module);
  // Seconds backward waited for a staging buffer this micro-step (0 when it did not reduce).
  double exposedSeconds() const;
  void end();

  // The step: this rank's share of the norm (collective-free), and the shard the optimizer
  // reads, brought where it reads it.
  NormPart normShare() const;
  GradientShard forOptimizer(Device& device, Stream* copies) const;
  // The offloaded optimizer's host shard: its gradients, then the update written over them.
  char* hostShard() const { return b_.hostShard; }
  // The stream that reads a caller's gradients (finished's `from`) and runs the kernels; null on
  // the host device.
  Stream* stream() const { return stream_.get(); }

 private:
  const ModelLayout& layout_;
  Device& device_;
  DeviceMemory workspace_;
  std::unique_ptr<Stream> stream_;        // the kernels' stream; null on the host device
  std::unique_ptr<DeviceNormPart> norm_;  // with stream_
  std::unique_ptr<comm::GradientBucketer> bucketer_;
  std::unique_ptr<GradientPolicy> policy_;
  ShardRange normShard_;
  GradientBuffers b_;
};

}  // namespace zrt
