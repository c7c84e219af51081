#include "runtime/rank_gradients.h"

#include <cstring>
#include <utility>

namespace zrt {

RankGradients::RankGradients(Device& device, const ModelLayout& layout, const ModelStates& states,
                             DType dtype, const ShardRange& normShard, std::unique_ptr<GradientPolicy> policy)
    : layout_(layout), policy_(std::move(policy)), normShard_(normShard) {
  b_.dtype = dtype;
  b_.es = dtypeSize(dtype);
  const StateBuffer& g = states.gradients() ? states.gradients() : states.gradientHostShard();
  b_.reduced = static_cast<char*>(g.data());
  b_.accumulator = static_cast<float*>(states.gradientAccumulator().data());
  b_.hostShard = static_cast<char*>(states.gradientHostShard().data());
  b_.shard = states.trainableLayout().shard;
  // The workspace is not a model state (the ZeRO formulas leave it out, as they leave out
  // PyTorch's .grad before DeepSpeed copies it into a bucket), so it is charged as "other".
  if (layout.widestModule) workspace_ = device.allocate(layout.widestModule * b_.es, MemTag::Other);
  b_.workspace = workspace_.as<char>();
}

RankGradients::~RankGradients() = default;

void RankGradients::connect(std::unique_ptr<comm::GradientBucketer> bucketer) {
  bucketer_ = std::move(bucketer);
  b_.bucketer = bucketer_.get();
}

void RankGradients::begin(int micro, int accumulation) {
  b_.micro = micro;
  b_.boundary = micro == accumulation - 1;
  b_.reducing = bucketer_ && policy_->reducesIn(micro, accumulation);
  if (b_.reducing) bucketer_->beginBackward(policy_->bucketsAccumulate(b_));
}

void RankGradients::finished(std::size_t module) {
  const auto& ids = layout_.moduleParams[module];
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {  // backward order inside the module
    const ParamInfo& p = layout_.params[*it];
    if (p.spec->trainable) policy_->finished(p, home(p), b_);
  }
}

void RankGradients::missing(std::size_t module) {
  for (std::size_t i : layout_.moduleParams[module]) {
    const ParamInfo& p = layout_.params[i];
    if (p.spec->trainable) std::memset(home(p), 0, p.numel * b_.es);
  }
  finished(module);
}

double RankGradients::exposedSeconds() const { return b_.reducing ? bucketer_->exposedSeconds() : 0.0; }

void RankGradients::end() {
  if (!b_.reducing) return;
  b_.reducing = false;
  bucketer_->finishBackward();
  policy_->reduced(b_);
}

NormPart RankGradients::normShare() const {
  if (!bucketer_) return {};
  const GradientShard g = policy_->normShare(b_, normShard_);
  // Padding past the real elements is not ours to read at stages 0/1.
  return normPart(g.type, g.data, normShard_.valid);
}

GradientShard RankGradients::forOptimizer(Device& device, Stream* copies) const {
  policy_->beforeOptimizer(device, copies, b_);
  return policy_->shard(b_);
}

}  // namespace zrt
