#include "runtime/rank_gradients.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace zrt {

RankGradients::RankGradients(Device& device, const ModelLayout& layout, const ModelStates& states,
                             DType dtype, const ShardRange& normShard,
                             std::unique_ptr<GradientPolicy> policy)
    : layout_(layout), device_(device), policy_(std::move(policy)), normShard_(normShard) {
  b_.dtype = dtype;
  b_.es = dtypeSize(dtype);
  const StateBuffer& g = states.gradients() ? states.gradients() : states.gradientHostShard();
  b_.reduced = static_cast<char*>(g.data());
  b_.shardOnHost = !states.gradients();
  b_.accumulator = static_cast<float*>(states.gradientAccumulator().data());
  b_.hostShard = static_cast<char*>(states.gradientHostShard().data());
  b_.shard = states.trainableLayout().shard;
  // The workspace is not a model state (the ZeRO formulas leave it out, as they leave out
  // PyTorch's .grad before DeepSpeed copies it into a bucket), so it is charged as "other".
  if (layout.widestModule) workspace_ = device.allocate(layout.widestModule * b_.es, MemTag::Other);
  b_.workspace = workspace_.as<char>();
  if (!device.hostReadsDeviceMemory()) {
    stream_ = device.createStream();
    b_.device = &device;
    b_.stream = stream_.get();
    const std::uint64_t normCount = std::max<std::uint64_t>(normShard.valid, b_.shard.count);
    norm_ = std::make_unique<DeviceNormPart>(device, normCount);
  }
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

void RankGradients::finished(std::size_t module) { finished(module, {}); }

void RankGradients::finished(std::size_t module, const std::vector<const void*>& from) {
  const auto& ids = layout_.moduleParams[module];
  ZRT_ENFORCE(from.empty() || from.size() == ids.size(), "gradients: ", from.size(), " buffers for the ",
              ids.size(), " parameters of module ", module);
  for (std::size_t k = ids.size(); k-- > 0;) {  // backward order inside the module
    const ParamInfo& p = layout_.params[ids[k]];
    if (!p.spec->trainable) continue;
    const char* grad = home(p);
    if (!from.empty() && from[k]) {
      if (stream_) {  // the policy's kernels read device memory only
        device_.copyAsync(home(p), from[k], p.numel * b_.es, *stream_);
        stream_->synchronize();
      } else {
        grad = static_cast<const char*>(from[k]);
      }
    }
    policy_->finished(p, grad, b_);
  }
}

void RankGradients::missing(std::size_t module) {
  for (std::size_t i : layout_.moduleParams[module]) {
    const ParamInfo& p = layout_.params[i];
    if (!p.spec->trainable) continue;
    if (stream_)
      device_.memsetAsync(home(p), 0, p.numel * b_.es, *stream_);
    else
      std::memset(home(p), 0, p.numel * b_.es);
  }
  if (stream_) stream_->synchronize();  // finished() hands the zeros on
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
  if (!norm_ || b_.shardOnHost) return normPart(g.type, g.data, normShard_.valid);
  norm_->launch(*stream_, g.type, g.data, normShard_.valid);
  return norm_->take(*stream_);
}

GradientShard RankGradients::forOptimizer(Device& device, Stream* copies) const {
  policy_->beforeOptimizer(device, copies, b_);
  return policy_->shard(b_);
}

}  // namespace zrt
