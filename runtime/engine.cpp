// The Engine's step loop: the micro-step protocol of engine.h, checked for misuse, and the step
// (global norm, clipping, the optimizer, the update's way back). What differs by stage or
// offload tier it asks the parts the assembler built (engine_assembly.cpp): this rank's
// gradients (RankGradients) and where the parameters live (ParameterHome).
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "comm/agreed_failure.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timing.h"
#include "runtime/engine_impl.h"
#include "runtime/optim/adam.h"
#include "runtime/collective_failure.h"

namespace zrt {

using Clock = std::chrono::steady_clock;

void Engine::Impl::checkModule(std::size_t module) const {
  if (module >= layout.moduleParams.size())
    ZRT_THROW(InvalidArgument, "engine: module ", module, " does not exist (", layout.moduleParams.size(),
              " modules)");
}

std::string Engine::Impl::callLabel(const char* call) const {
  return std::string("Engine::") + call + "()" + when();
}

std::string Engine::Impl::callLabel(const char* call, std::size_t module) const {
  return std::string("Engine::") + call + "(module '" + moduleName(module) + "')" + when();
}

std::string Engine::Impl::when() const {
  const std::string step = "step " + std::to_string(attempted + 1);
  return inMicro ? ", micro-step " + std::to_string(micro) + " of " + step : ", " + step;
}

// A call after an agreed error the caller caught means that error is over: an exception from
// here on is this rank's own (comm/agreed_failure.h).
comm::CallerLabel Engine::Impl::enter(std::string label) {
  comm::clearAgreedFailure();
  return comm::CallerLabel(std::move(label));
}

int Engine::stage() const { return impl_->stage; }
DType Engine::precision() const { return impl_->dtype; }
int Engine::accumulationSteps() const { return impl_->accumulation; }
std::size_t Engine::numModules() const { return impl_->model.modules.size(); }
int Engine::moduleIndex(const std::string& name) const {
  auto it = impl_->layout.moduleByName.find(name);
  return it == impl_->layout.moduleByName.end() ? -1 : static_cast<int>(it->second);
}
const std::string& Engine::moduleName(std::size_t module) const { return impl_->model.modules.at(module).name; }
double Engine::lossScale() const { return impl_->scaler.scale(); }
void Engine::setLearningRates(const std::vector<double>& perGroup) {
  if (perGroup.size() != impl_->model.groups.size())
    ZRT_THROW(InvalidArgument, "Engine::setLearningRates: ", perGroup.size(), " learning rates for ",
              impl_->model.groups.size(), " parameter groups");
  for (std::size_t g = 0; g < perGroup.size(); ++g)
    if (!std::isfinite(perGroup[g]) || perGroup[g] < 0)
      ZRT_THROW(InvalidArgument, "Engine::setLearningRates: group ", g, "'s learning rate ", perGroup[g],
                " is negative or not finite");
  impl_->lrOverride = perGroup;
}
std::vector<double> Engine::learningRates() const {
  std::vector<double> out;
  for (std::size_t g = 0; g < impl_->model.groups.size(); ++g)
    out.push_back(impl_->groupLr(static_cast<int>(g), impl_->taken));
  return out;
}
double Engine::gradientSeed() const { return impl_->scaler.scale() / impl_->accumulation; }

void Engine::beginMicroStep() {
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("beginMicroStep"));
  Impl& e = *impl_;
  if (e.inMicro) ZRT_THROW(InvalidArgument, "engine: beginMicroStep twice without endMicroStep");
  if (e.micro >= e.accumulation)
    ZRT_THROW(InvalidArgument, "engine: ", e.accumulation,
              " micro-steps (gradient_accumulation_steps) are done; call step() first");
  e.inMicro = true;
  comm::CallerLabel::beginSpan();  // the caller's compute between its calls is part of the step
  std::fill(e.done.begin(), e.done.end(), 0);
  e.handedOut = -1;
  e.gradients->begin(e.micro, e.accumulation);
  e.microStart = Clock::now();
  e.parameters->beginPass();
}

std::vector<TensorRef> Engine::parameters(std::size_t module) {
  impl_->checkModule(module);
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("parameters", module));
  return impl_->parameters->parameters(module);
}

void Engine::release(std::size_t module) {
  impl_->checkModule(module);
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("release", module));
  impl_->parameters->release(module);
}

std::vector<TensorRef> Engine::gradients(std::size_t module) {
  Impl& e = *impl_;
  e.checkModule(module);
  const comm::CallerLabel label = Impl::enter(e.callLabel("gradients", module));
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: gradients() outside a micro-step");
  if (e.handedOut >= 0 && static_cast<std::size_t>(e.handedOut) != module)
    e.misused(Impl::kOutOfOrder, "module '" + e.moduleName(module) + "' asked for its gradient buffers before module '" +
              e.moduleName(static_cast<std::size_t>(e.handedOut)) + "' called backwardDone");
  e.handedOut = static_cast<int>(module);
  std::vector<TensorRef> out;
  for (std::size_t i : e.layout.moduleParams[module]) {
    const ParamInfo& p = e.layout.params[i];
    void* data = p.spec->trainable ? e.gradients->home(p) : nullptr;
    out.push_back({&p.spec->name, &p.spec->shape, data, e.dtype, p.numel});
  }
  return out;
}

void Engine::backwardDone(std::size_t module) { backwardDone(module, {}); }

void Engine::backwardDone(std::size_t module, const std::vector<const void*>& from) {
  Impl& e = *impl_;
  e.checkModule(module);
  const comm::CallerLabel label = Impl::enter(e.callLabel("backwardDone", module));
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: backwardDone() outside a micro-step");
  if (e.done[module]) {
    e.misused(Impl::kReportedTwice, "module '" + e.moduleName(module) + "' reported its gradients twice in micro-step " +
              std::to_string(e.micro));
    return;
  }
  if (!from.empty() && from.size() != e.layout.moduleParams[module].size())
    ZRT_THROW(InvalidArgument, "engine: backwardDone: module '", e.moduleName(module), "' has ",
              e.layout.moduleParams[module].size(), " parameters, ", from.size(), " gradient buffers given");
  e.done[module] = 1;
  e.handedOut = -1;
  e.gradients->finished(module, from);
}

Stream* Engine::gradientStream() const {
  return impl_->gradients ? impl_->gradients->stream() : nullptr;
}

// Every rank learns whether any rank misused the API this micro-step, after the collectives
// every rank posted, and all throw the same error under a headline naming every kind of misuse
// any rank saw: each rank sends its kinds (a number) and its first misuse's detail.
void Engine::Impl::agreeNoMisuse() {
  const unsigned kinds = std::exchange(misuseKinds, 0u);
  const std::string detail = std::exchange(misuse, {});
  std::vector<std::string> all =
      gatherFailures(comm, kinds == 0 ? std::string() : std::to_string(kinds) + ":" + detail);
  unsigned seen = 0;
  for (std::string& failure : all) {
    if (failure.empty()) continue;
    const std::size_t colon = failure.find(':');
    seen |= static_cast<unsigned>(std::stoul(failure.substr(0, colon)));
    failure.erase(0, colon + 1);
  }
  if (seen == 0) return;
  static constexpr std::pair<Misuse, const char*> kHeadlines[] = {
      {kUnreleased, "modules fetched and never released"},
      {kReportedTwice, "a module reported its gradients twice"},
      {kNeverReported, "a module never reported its gradients"},
      {kOutOfOrder, "a module asked for its gradient buffers before the previous one reported"},
  };
  std::string headline;
  for (const auto& [kind, text] : kHeadlines)
    if (seen & kind) headline += (headline.empty() ? "" : "; ") + std::string(text);
  // endMicroStep counted the micro-step already.
  throwGathered<InvalidArgument>(all, "engine: " + headline + " in micro-step " + std::to_string(micro - 1) +
                                          " of step " + std::to_string(attempted + 1) + ":");
}

void Engine::endMicroStep() {
  Impl& e = *impl_;
  const comm::CallerLabel label = Impl::enter(e.callLabel("endMicroStep"));
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: endMicroStep without beginMicroStep");
  const double wall = secondsSince(e.microStart);
  for (std::size_t m = 0; m < e.done.size(); ++m) {
    if (e.done[m] || !e.layout.trains(m)) continue;
    e.misused(Impl::kNeverReported, "module '" + e.moduleName(m) + "' never reported its gradients in micro-step " +
              std::to_string(e.micro));
    e.gradients->missing(m);
  }
  // Waits during backward (for a staging buffer or a gather) were communication the caller sat
  // through; the rest of the micro-step was the caller's compute.
  double waitedInBackward = e.gradients->exposedSeconds();
  std::string unreleased;
  const FetchCounts c = e.parameters->takeCounts(unreleased);
  waitedInBackward += c.waitedSeconds + c.readWaitSeconds;
  e.fetches.onDemand += c.onDemand;
  e.fetches.prefetched += c.prefetched;
  e.fetches.reused += c.reused;
  e.fetches.readAhead += c.readAhead;
  e.fetches.readWaitSeconds += c.readWaitSeconds;
  if (!unreleased.empty()) e.misused(Impl::kUnreleased, unreleased);
  const auto t0 = Clock::now();
  e.inMicro = false;
  comm::CallerLabel::endSpan();
  ++e.micro;
  e.gradients->end();
  // A parameter read from NVMe that failed on any rank fails the micro-step on every rank (the
  // gathers went on, so nobody waits; the step's values are not used).
  if (const std::optional<std::string> failure = e.parameters->takeIoFailure())
    throwIfAnyRankFailed<PeerError>(e.comm, failure->empty() ? std::string() : failureOf(IoError(*failure)),
                                    "engine: reading parameters failed:");
  e.agreeNoMisuse();
  e.parameters->endPass();
  e.commSeconds += waitedInBackward + secondsSince(t0);
  e.computeSeconds += std::max(0.0, wall - waitedInBackward);
}

// fp32 and bf16 have no loss scale to lower: a skipped step means the gradients themselves hold
// inf or NaN (a diverged run, bad data), which every skip says and zrt.max_skipped_steps in a
// row ends, on every rank (each saw the same overflow), before the run trains on nothing.
// fp16's skips are dynamic loss scaling at work, as DeepSpeed's.
void Engine::Impl::noteSkips(bool skipped, std::int64_t step) {
  if (!skipped) {
    skippedInRow = 0;
    return;
  }
  ++skippedInRow;
  if (rank == 0)
    logWarning(detail::cat("engine: step ", step, " skipped: the gradients hold inf or NaN (", nameOf(dtype),
                           " training has no loss scale to lower); ", skippedInRow, " in a row"));
  const int limit = config.zrt.max_skipped_steps;
  if (limit > 0 && skippedInRow >= limit) {
    comm::markAgreedFailure();
    ZRT_THROW(Error, "engine: ", skippedInRow, " optimizer steps in a row skipped because the gradients hold inf "
              "or NaN (", nameOf(dtype), " training, steps ", step - skippedInRow + 1, "-", step,
              "): the run has diverged or its data is bad (zrt.max_skipped_steps ", limit, ")");
  }
}

StepReport Engine::step() {
  Impl& e = *impl_;
  const comm::CallerLabel label = Impl::enter(e.callLabel("step"));
  if (e.inMicro) ZRT_THROW(InvalidArgument, "engine: step() inside a micro-step");
  if (e.micro != e.accumulation)
    ZRT_THROW(InvalidArgument, "engine: step() after ", e.micro, " of ", e.accumulation,
              " micro-steps (gradient_accumulation_steps)");
  const auto t0 = Clock::now();
  StepReport r;
  r.step = ++e.attempted;
  r.lossScale = e.scaler.scale();
  r.lr = e.groupLr(0, e.taken);

  // The global norm and overflow from every rank's part, added in rank order so every rank
  // gets the same bits.
  const NormPart mine = e.gradients->normShare();
  std::vector<NormPart> parts(static_cast<std::size_t>(e.world));
  const auto tc = Clock::now();
  e.comm.allGather(&mine, parts.data(), sizeof(NormPart) / 4, DType::F32);
  double commSeconds = secondsSince(tc);
  double sumSq = 0;
  bool overflow = false;
  for (const NormPart& p : parts) {
    sumSq += p.sumSq;
    overflow = overflow || p.nonFinite != 0;
  }
  const double scale = e.scaler.scale();
  r.gradNorm = overflow ? std::numeric_limits<double>::infinity() : std::sqrt(sumSq) / scale;

  if (overflow) {
    r.taken = false;
  } else {
    double clip = 1.0;
    const double maxNorm = e.config.gradient_clipping;
    if (maxNorm > 0 && r.gradNorm > maxNorm) clip = maxNorm / (r.gradNorm + 1e-6);
    // An optimizer that fails on one rank (an NVMe read) must not leave the others waiting in
    // the gathers that follow: every rank hears of it here, before any rank copies its update
    // up, so every rank keeps the step's old parameters. (Not where the parameter shard is the
    // master weights' file, fp32 with both on NVMe: there, as the master weights everywhere,
    // the shard may be part-updated, and a checkpoint is the way back.)
    e.optimizerState->agreeing(e.comm, "engine: the optimizer step failed:",
                               [&] { e.runOptimizer(optim::gradMultiplier(scale, clip)); });
    if (e.trainableStore) {
      // A write that fails on one rank leaves that rank's shard file half updated: every rank
      // stops here with the error (file and offset), before any gathers from the new shards.
      const auto tw = Clock::now();
      onEveryRankOrNone<PeerError>(e.comm, "engine: writing the updated parameters to NVMe failed:",
                                   [&] { e.copyUpdateUp(); });
      r.ioSeconds += secondsSince(tw);
    } else {
      e.copyUpdateUp();
    }
    r.ioSeconds += e.optimizerState->takeIoWaitSeconds();
    ++e.taken;
    const auto tg = Clock::now();
    e.parameters->publishUpdate();  // gathers the shards, or (stage 3) drops stale copies
    commSeconds += secondsSince(tg);
  }
  e.scaler.update(overflow);
  e.micro = 0;
  if (e.dtype != DType::F16) e.noteSkips(overflow, r.step);
  r.optimizerSeconds = secondsSince(t0) - commSeconds;
  r.commSeconds = e.commSeconds + commSeconds;
  r.computeSeconds = e.computeSeconds;
  r.gathersOnDemand = e.fetches.onDemand;
  r.gathersPrefetched = e.fetches.prefetched;
  r.gathersReused = e.fetches.reused;
  r.paramReadsAhead = e.fetches.readAhead;
  r.paramReadWaitSeconds = e.fetches.readWaitSeconds;
  e.fetches = {};
  e.commSeconds = e.computeSeconds = 0;
  return r;
}

std::string Engine::memorySummary() const { return impl_->device.ledger().table(); }

std::optional<offload::EngineStats> Engine::ioStats() const {
  if (!impl_->io) return std::nullopt;
  return impl_->io->stats();
}

const comm::Communicator* Engine::gatherLane() const { return impl_->gatherLane.get(); }

std::vector<float> Engine::parameterValues(std::size_t module, std::size_t param) const {
  const Impl& e = *impl_;
  const comm::CallerLabel label = Impl::enter(e.callLabel("parameterValues", module));
  return e.parameters->value(e.layout.params.at(e.layout.moduleParams.at(module).at(param)));
}

}  // namespace zrt
