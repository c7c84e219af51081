// Stages 2 and 3: every micro-step reduces into this rank's shard, so a rank never holds more
// than its shard of gradients. The buckets add the micro-steps up in the training dtype, or,
// with an fp32 accumulator, overwrite the shard, which is then added into the accumulator.
#include "core/element_arithmetic.h"
#include "core/elementwise.h"
#include "runtime/rank_gradients.h"
#include "runtime/stage_policy.h"

namespace zrt {
namespace {

class ShardedGradients final : public GradientPolicy {
 public:
  bool reducesIn(int, int) const override { return true; }
  bool bucketsAccumulate(const GradientBuffers& b) const override { return b.micro > 0 && !b.accumulator; }

  // The workspace is reused for the next module at once: gradients are copied into their bucket
  // on arrival.
  char* home(const ParamInfo& p, const GradientBuffers& b) const override {
    return b.workspace + p.scratchOffset * b.es;
  }

  void finished(const ParamInfo& p, const char* grad, const GradientBuffers& b) override {
    b.bucketer->gradientReady(p.tensor, grad);
  }

  void reduced(const GradientBuffers& b) override {
    if (!b.accumulator) return;
    if (!b.device || b.shardOnHost)
      return widenInto(b.dtype, b.reduced, b.accumulator, b.shard.count, /*add=*/b.micro > 0);
    const ElementwiseOp op = b.micro > 0 ? ElementwiseOp::Add : ElementwiseOp::Cast;
    b.device->launch(unaryArgs(op, DType::F32, b.accumulator, b.dtype, b.reduced, b.shard.count),
                     *b.stream);
    b.stream->synchronize();  // the next micro-step's buckets overwrite the shard it reads
  }

  GradientShard shard(const GradientBuffers& b) const override {
    if (b.accumulator) return {reinterpret_cast<const char*>(b.accumulator), DType::F32};
    if (b.hostShard) return {b.hostShard, b.dtype};
    return {b.reduced, b.dtype};
  }

  GradientShard normShare(const GradientBuffers& b, const ShardRange&) const override { return shard(b); }

  void beforeOptimizer(Device&, Stream*, const GradientBuffers&) const override {}
};

}  // namespace

std::unique_ptr<GradientPolicy> shardedGradients() { return std::make_unique<ShardedGradients>(); }

}  // namespace zrt
