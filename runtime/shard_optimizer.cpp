// The optimizer on this rank's shard, window by window of its fp32 states as their home hands
// them (optimizer_state_home.h: in memory, or streamed from NVMe by the swapper), reading the shard of gradients RankGradients
// hands it, and the updated shard's way back to the parameters when the optimizer is offloaded.
#include <algorithm>

#include "core/error.h"
#include "core/shard.h"
#include "runtime/device_kernels.h"
#include "runtime/engine_impl.h"
#include "runtime/optim/adam.h"
#include "runtime/optim/sgd.h"

namespace zrt {

double Engine::Impl::groupLr(int group, std::int64_t step) const {
  if (!lrOverride.empty()) return lrOverride[static_cast<std::size_t>(group)];
  const double base = config.optimizer.lr;
  const double own = model.groups[static_cast<std::size_t>(group)].lr;
  const double scheduled = schedule.lrAt(step);
  if (own < 0) return scheduled;
  return base > 0 ? scheduled * own / base : own;
}

double Engine::Impl::groupWeightDecay(int group) const {
  const double own = model.groups[static_cast<std::size_t>(group)].weightDecay;
  return own < 0 ? config.optimizer.weight_decay : own;
}

void Engine::Impl::runOptimizer(double gradScale) {
  const ShardRange& shard = states->trainableLayout().shard;
  if (shard.count == 0) return;
  const GradientShard grads = gradients->forOptimizer(device, copyStream.get());
  optimizerState->forEach([&](const OptimizerWindow& w) {
    stepWindow(grads, gradScale, w.begin, w.count, w.master, w.moment0, w.moment1);
  });
  // The kernels update the shard the gathers read next.
  if (kernelStream) kernelStream->synchronize();
}

// Offloaded: the updated shard, written over its gradients in the host shard, goes back up to
// the device (after every rank's optimizer succeeded, so a failure leaves every rank's
// parameters as they were).
void Engine::Impl::copyUpdateUp() {
  const ShardRange& shard = states->trainableLayout().shard;
  if (!optimizerOffloaded() || shard.count == 0) return;
  if (trainableStore) {  // offload_param nvme: the shard goes back to its file (and host part)
    trainableStore->writeAfterStep(gradients->hostShard());
    return;
  }
  device.copyAsync(parameters->trainableShard(), gradients->hostShard(), shard.count * es, *copyStream);
  copyStream->synchronize();
}

// The optimizer on elements [begin, begin + count) of the shard, whose fp32 states start at
// `master` and the moments (the whole shard in memory, or one sub-group swapped in).
void Engine::Impl::stepWindow(const GradientShard& gradShard, double gradScale, std::uint64_t begin,
                              std::uint64_t count, float* master, float* moment0, float* moment1) {
  const ShardRange& shard = states->trainableLayout().shard;
  const DType gradType = gradShard.type;
  const char* grads = gradShard.data + begin * dtypeSize(gradType);
  char* paramShard = parameters->trainableShard();
  float* param = master ? master : reinterpret_cast<float*>(paramShard) + begin;
  // With a master copy the updated value is also written in the training dtype: into the
  // device shard, or, offloaded, over the host shard's consumed gradients for the copy back.
  void* copy = master ? (optimizerOffloaded() ? gradients->hostShard() : paramShard) + begin * es : nullptr;
  const OptimizerConfig& oc = config.optimizer;
  optim::StepOptions stepOptions;
  stepOptions.threads = optimizerState->optimizerThreads();
  // What changes with the step and the group, the same for every optimizer.
  auto perStep = [&](auto& h, int group) {
    h.lr = groupLr(group, taken);
    h.weightDecay = groupWeightDecay(group);
    h.step = taken + 1;  // taken steps only: a skipped step does not advance bias correction
    h.gradScale = gradScale;
  };
  for (const ParamInfo& p : layout.params) {
    if (!p.spec->trainable) continue;
    const ShardPiece piece = pieceInShard(p.offset, p.numel, shard);
    const std::uint64_t lo = std::max(piece.inShard, begin);
    const std::uint64_t hi = std::min(piece.inShard + piece.count, begin + count);
    if (piece.count == 0 || hi <= lo) continue;
    const int g = p.spec->group;
    if (oc.type == OptimizerType::SGD) {
      optim::SgdHyper h;
      perStep(h, g);
      h.momentum = oc.momentum;
      h.dampening = oc.dampening;
      h.nesterov = oc.nesterov;
      optim::SgdState s{param, moment0, grads, gradType, copy, dtype, count};
      if (kernelStream && !optimizerOffloaded())  // states in device memory the host cannot touch
        launchSgdStep(device, *kernelStream, h, s, lo - begin, hi - lo);
      else
        optim::sgdStep(h, s, lo - begin, hi - lo, stepOptions);
    } else {
      optim::AdamHyper h;
      perStep(h, g);
      h.beta1 = oc.beta1;
      h.beta2 = oc.beta2;
      h.eps = oc.eps;
      h.decoupledWeightDecay = oc.adam_w_mode;
      optim::AdamState s{param, moment0, moment1, grads, gradType, copy, dtype, count};
      if (kernelStream && !optimizerOffloaded())  // states in device memory the host cannot touch
        launchAdamStep(device, *kernelStream, h, s, lo - begin, hi - lo);
      else
        optim::adamStep(h, s, lo - begin, hi - lo, stepOptions);
    }
  }
}

}  // namespace zrt
