// Stages 0 and 1: every rank keeps the whole gradient buffer. Micro-steps add up locally, into
// the buffer (or the fp32 accumulator in 16-bit training), and the sum is all-reduced once, in
// the step's last micro-step.
#include <cstring>

#include "core/element_arithmetic.h"
#include "core/elementwise.h"
#include "runtime/rank_gradients.h"
#include "runtime/stage_policy.h"

namespace zrt {
namespace {

class ReplicatedGradients final : public GradientPolicy {
 public:
  explicit ReplicatedGradients(bool copiesShardDown) : copiesShardDown_(copiesShardDown) {}

  bool reducesIn(int micro, int accumulation) const override { return micro == accumulation - 1; }
  bool bucketsAccumulate(const GradientBuffers&) const override { return false; }

  // A step's first micro-step (without an fp32 accumulator) would only copy the caller's
  // gradients into the gradient buffer: the caller writes them there instead. Later micro-steps
  // add onto it, so they use the workspace.
  char* home(const ParamInfo& p, const GradientBuffers& b) const override {
    const bool inPlace = b.micro == 0 && !b.accumulator;
    return inPlace ? b.reduced + p.offset * b.es : b.workspace + p.scratchOffset * b.es;
  }

  void finished(const ParamInfo& p, const char* grad, const GradientBuffers& b) override {
    char* dst = b.reduced + p.offset * b.es;
    if (b.device) {
      finishedOnDevice(p, grad, dst, b);
    } else if (float* acc = b.accumulator) {
      widenInto(b.dtype, grad, acc + p.offset, p.numel, /*add=*/b.micro > 0);
      if (b.boundary)  // the sum is rounded to the dtype once, for the all-reduce
        for (std::uint64_t i = 0; i < p.numel; ++i) zrt::storeElement(b.dtype, dst, i, acc[p.offset + i]);
    } else if (b.micro == 0) {
      if (grad != dst) std::memcpy(dst, grad, p.numel * b.es);
    } else {
      zrt::sumPair(b.dtype, grad, dst, p.numel);  // fp32 add, one rounding
    }
    if (b.reducing) b.bucketer->gradientReady(p.tensor, dst);
  }

  void reduced(const GradientBuffers&) override {}

  // The same arithmetic as kernels (core/elementwise.h gives element_arithmetic's bits).
  static void finishedOnDevice(const ParamInfo& p, const char* grad, char* dst,
                               const GradientBuffers& b) {
    Device& d = *b.device;
    if (float* acc = b.accumulator) {
      const ElementwiseOp op = b.micro > 0 ? ElementwiseOp::Add : ElementwiseOp::Cast;
      d.launch(unaryArgs(op, DType::F32, acc + p.offset, b.dtype, grad, p.numel), *b.stream);
      if (b.boundary)
        d.launch(castArgs(b.dtype, dst, DType::F32, acc + p.offset, p.numel), *b.stream);
    } else if (b.micro == 0) {
      if (grad != dst) d.copyAsync(dst, grad, p.numel * b.es, *b.stream);
    } else {
      d.launch(unaryArgs(ElementwiseOp::Add, b.dtype, dst, b.dtype, grad, p.numel), *b.stream);
    }
    // The bucketer copies `dst` on its own stream, and the caller writes the workspace again as
    // soon as this returns: both wait for the kernels here.
    b.stream->synchronize();
  }

  GradientShard shard(const GradientBuffers& b) const override {
    if (b.hostShard) return {b.hostShard, b.dtype};  // stage 1 copies its shard down first
    return {b.reduced + b.shard.begin * b.es, b.dtype};
  }

  // This rank's part of the whole (reduced) buffer: every rank holds all of it, each adds a part.
  GradientShard normShare(const GradientBuffers& b, const ShardRange& normShard) const override {
    return {b.reduced + normShard.begin * b.es, b.dtype};
  }

  void beforeOptimizer(Device& device, Stream* copies, const GradientBuffers& b) const override {
    if (!copiesShardDown_ || !b.hostShard) return;  // the reduced shard goes down to the host
    device.copyAsync(b.hostShard, b.reduced + b.shard.begin * b.es, b.shard.count * b.es, *copies);
    copies->synchronize();
  }

 private:
  bool copiesShardDown_;
};

}  // namespace

std::unique_ptr<GradientPolicy> replicatedGradients(bool copiesShardDown) {
  return std::make_unique<ReplicatedGradients>(copiesShardDown);
}

}  // namespace zrt
