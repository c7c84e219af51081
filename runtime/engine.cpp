#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "comm/reduce_kernels.h"
#include "comm/string_gather.h"
#include "core/error.h"
#include "core/shard.h"
#include "core/timing.h"
#include "partition/model_states.h"
#include "partition/param_coordinator.h"
#include "partition/param_store.h"
#include "offload/aio_options.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "offload/swap_space.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/loss_scaler.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer_swapper.h"
#include "runtime/optim/adam.h"
#include "runtime/optim/sgd.h"

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

struct ParamInfo {
  std::size_t module = 0;
  const ParamSpec* spec = nullptr;
  std::uint64_t numel = 0;
  std::uint64_t offset = 0;  // in the trainable or the frozen flat buffer
  std::size_t tensor = 0;    // index among the trainable (bucketer tensors) or frozen tensors
  std::uint64_t scratchOffset = 0;  // trainable: where its gradient sits in the workspace
};

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t nl = s.find('\n', at);
    lines.push_back(s.substr(at, nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return lines;
}

// Throws on every rank (they all see the same descriptions) when registrations differ, naming
// the first parameter that differs and what each rank registered there.
void checkSameRegistration(comm::Communicator& comm, const EngineModel& model) {
  std::string mine;
  for (const std::string& line : describeParams(model)) mine += line + "\n";
  const std::vector<std::string> all = comm::allGatherStrings(comm, mine);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; })) return;
  std::vector<std::vector<std::string>> lines;
  std::size_t most = 0;
  for (const std::string& s : all) {
    lines.push_back(splitLines(s));
    most = std::max(most, lines.back().size());
  }
  for (std::size_t i = 0; i < most; ++i) {
    std::map<std::string, std::string> ranksBy;  // what was registered -> which ranks
    for (std::size_t r = 0; r < lines.size(); ++r) {
      const std::string what = i < lines[r].size() ? "'" + lines[r][i] + "'" : "nothing (" +
                               std::to_string(lines[r].size()) + " parameters in all)";
      std::string& ranks = ranksBy[what];
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
    if (ranksBy.size() == 1) continue;
    std::string detail;
    for (const auto& [what, ranks] : ranksBy) detail += "\n  rank(s) " + ranks + ": " + what;
    ZRT_THROW(InvalidArgument, "engine: ranks registered different models; first difference at "
              "parameter #", i, ":", detail);
  }
}

// Every rank learns what failed on any rank (`mine` empty: nothing here) and all throw the
// same error, or none does: a rank that fails alone would leave its peers waiting in the next
// collective.
template <class ErrorType>
void throwIfAnyRankFailed(comm::Communicator& comm, const std::string& mine, const std::string& what) {
  std::vector<std::string> all = comm::allGatherStrings(comm, mine);
  all[static_cast<std::size_t>(comm.rank())] = mine;  // heard even through a silent backend
  std::string report;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) report += "\n  rank " + std::to_string(r) + ": " + all[r];
  if (!report.empty()) ZRT_THROW(ErrorType, what, report);
}

// Sum of squares (in double) and whether anything is inf or NaN.
struct NormPart {
  double sumSq = 0;
  double nonFinite = 0;
};

// The squares go into independent partial sums: one running sum is a chain of dependent adds and
// took 1% of a 4 x 256 GPT-2's step, as much as AdamW's pass. No element needs its own inf/NaN
// test either: a finite float's square is below 1.2e77, so a sum of them stays finite in double,
// and the sum is inf or NaN exactly when some element is.
template <class Load>
NormPart normPartOf(std::size_t count, Load load) {
  constexpr std::size_t kLanes = 8;
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) {
      const double v = load(i + k);
      lane[k] += v * v;
    }
  for (; i < count; ++i) {
    const double v = load(i);
    lane[0] += v * v;
  }
  NormPart p;
  for (const double l : lane) p.sumSq += l;
  p.nonFinite = std::isfinite(p.sumSq) ? 0 : 1;
  return p;
}

// acc[i] = x[i] (add: acc[i] += x[i]), x in `t`, in fp32.
void widenInto(DType t, const void* x, float* acc, std::size_t count, bool add) {
  const auto* h = static_cast<const std::uint16_t*>(x);
  const auto* f = static_cast<const float*>(x);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = t == DType::F32 ? f[i] : t == DType::BF16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
    acc[i] = add ? acc[i] + v : v;
  }
}

NormPart normPartSerial(DType t, const void* base, std::size_t count) {
  const auto* h = static_cast<const std::uint16_t*>(base);
  switch (t) {
    case DType::F32: return normPartOf(count, [&](std::size_t i) { return static_cast<const float*>(base)[i]; });
    case DType::F16: return normPartOf(count, [&](std::size_t i) { return halfToFloat(h[i]); });
    case DType::BF16: return normPartOf(count, [&](std::size_t i) { return bf16ToFloat(h[i]); });
  }
  return {};
}

// The threads share fixed-size chunks and the chunks' sums are added in chunk order, so the
// norm has the same bits whatever the thread count (resuming on another machine, say). Serial,
// the pass took 0.9% of a 4 x 256 GPT-2's step with the other core idle.
constexpr std::size_t kNormChunk = std::size_t{1} << 16;

NormPart normPart(DType t, const void* base, std::size_t count) {
  const std::size_t chunks = (count + kNormChunk - 1) / kNormChunk;
  if (chunks <= 1) return normPartSerial(t, base, count);
  std::vector<NormPart> parts(chunks);
  const auto* bytes = static_cast<const char*>(base);
  const std::size_t es = dtypeSize(t);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(chunks); ++c) {
    const std::size_t first = static_cast<std::size_t>(c) * kNormChunk;
    parts[static_cast<std::size_t>(c)] =
        normPartSerial(t, bytes + first * es, std::min(kNormChunk, count - first));
  }
  NormPart whole;
  for (const NormPart& p : parts) whole.sumSq += p.sumSq;
  whole.nonFinite = std::isfinite(whole.sumSq) ? 0 : 1;
  return whole;
}

}  // namespace

struct Engine::Impl {
  Impl(const Config& c, Device& d, comm::Communicator& cm, EngineModel m)
      : config(c), device(d), comm(cm), model(std::move(m)) {}

  Config config;
  Device& device;
  comm::Communicator& comm;
  EngineModel model;
  int world = 1;
  int rank = 0;
  int stage = 0;
  DType dtype = DType::F32;
  std::size_t es = 4;
  int accumulation = 1;

  std::vector<ParamInfo> params;
  std::vector<std::vector<std::size_t>> moduleParams;
  std::map<std::string, std::size_t> moduleByName;
  // offload_optimizer = nvme: the pinned buffers, the I/O engine reading into them and the swap
  // directory, all outliving the model states whose swap files live there.
  std::unique_ptr<offload::PinnedBufferPool> swapBuffers;
  std::unique_ptr<offload::OffloadEngine> io;
  std::unique_ptr<offload::SwapSpace> swapSpace;
  std::unique_ptr<offload::SwapSpace> paramSwapSpace;  // offload_param's own nvme_path
  std::unique_ptr<ModelStates> states;
  // offload_param nvme: the trainable and frozen shards, part in host memory, part on NVMe.
  std::unique_ptr<ParamShardStore> trainableStore, frozenStore;
  std::unique_ptr<OptimizerSwapper> swapper;
  std::unique_ptr<Stream> copyStream;  // offloaded optimizer: host <-> device copies
  std::unique_ptr<comm::GradientBucketer> bucketer;
  std::unique_ptr<comm::Communicator> gatherLane;  // outlives the gatherer that posts to it
  std::unique_ptr<comm::AllGatherBucketer> gatherer;
  std::unique_ptr<ParamCoordinator> coordinator;  // stage 3
  std::vector<CoordinatedModule> moduleRanges;
  DeviceMemory workspace;  // one module's gradients as the caller writes them
  LossScaler scaler;
  LrSchedule schedule = LrSchedule::fromConfig(SchedulerConfig{}, 0.0);
  // The part of the gradients whose norm this rank adds up: its shard at every stage (at stages
  // 0/1 every rank holds all gradients, but each adds only its part).
  ShardRange normShard;

  // Per step and micro-step.
  int micro = 0;  // micro-steps finished in this step
  bool inMicro = false;
  bool reducing = false;  // the bucketer has a backward open
  std::vector<char> done;
  std::string misuse;
  int handedOut = -1;  // module whose gradients are in the workspace
  std::int64_t attempted = 0;
  std::int64_t taken = 0;
  double computeSeconds = 0, commSeconds = 0;
  FetchCounts fetches;  // stage 3, this step
  Clock::time_point microStart;

  bool boundaryMicro() const { return micro == accumulation - 1; }
  // Stages 0-2: where parameter p lives in the whole flat buffer (not at stage 3: shards only).
  char* paramBase(const ParamInfo& p) const {
    const StateBuffer& b = p.spec->trainable ? states->parameters() : states->frozenParameters();
    return static_cast<char*>(b.data()) + p.offset * es;
  }
  // This rank's shard of the trainable parameters: inside the whole buffer at stages 0-2, the
  // buffer itself at stage 3.
  char* paramShard() const {
    char* base = static_cast<char*>(states->parameters().data());
    return stage >= 3 ? base : base + states->trainableLayout().shard.begin * es;
  }
  bool optimizerOffloaded() const { return static_cast<bool>(states->gradientHostShard()); }
  // Where the gradients reduce to: the device buffer, or at stages 2-3 with the optimizer
  // offloaded the host shard (there is no device buffer then).
  char* gradBase() const {
    const StateBuffer& g = states->gradients() ? states->gradients() : states->gradientHostShard();
    return static_cast<char*>(g.data());
  }
  char* hostShard() const { return static_cast<char*>(states->gradientHostShard().data()); }
  // 16-bit training with accumulation: the fp32 sum of the micro-steps (model_states.h).
  float* accumulator() const { return static_cast<float*>(states->gradientAccumulator().data()); }
  // What the optimizer and the norm read: this rank's shard of the step's gradients.
  const char* stepGradients() const {
    if (stage >= 2 && accumulator()) return reinterpret_cast<const char*>(accumulator());
    if (optimizerOffloaded()) return hostShard();  // stage 1 copies its shard down first
    return gradBase() + (stage <= 1 ? states->trainableLayout().shard.begin * es : 0);
  }
  DType stepGradientType() const { return stage >= 2 && accumulator() ? DType::F32 : dtype; }
  // At stages 0/1 a step's first micro-step (without an fp32 accumulator) would only copy the
  // caller's gradients into the gradient buffer: the caller writes them there instead. Later
  // micro-steps add onto it, so they use the workspace.
  bool gradientsInPlace() const { return stage <= 1 && micro == 0 && !accumulator(); }
  // Where the caller writes trainable parameter p's gradient this micro-step.
  char* gradientOf(const ParamInfo& p) const {
    return gradientsInPlace() ? gradBase() + p.offset * es : workspace.as<char>() + p.scratchOffset * es;
  }
  const std::string& moduleName(std::size_t m) const { return model.modules[m].name; }

  void validate();
  void layOut();
  void initialise();
  void misused(std::string what) {
    if (misuse.empty()) misuse = std::move(what);
  }
  void feed(std::size_t module);
  void agreeNoMisuse();
  double groupLr(int group, std::int64_t step) const;
  double groupWeightDecay(int group) const;
  void runOptimizer(double gradScale);
  void copyUpdateUp();
  void stepWindow(double gradScale, std::uint64_t begin, std::uint64_t count, float* master,
                  float* moment0, float* moment1);
};

void Engine::Impl::validate() {
  world = comm.size();
  rank = comm.rank();
  stage = config.zero_optimization.stage;
  if (config.world_size != world)
    ZRT_THROW(InvalidArgument, "engine: the config (", config.source, ") was resolved for ",
              config.world_size, " ranks but the communicator has ", world);
  if (stage < 0 || stage > 3)
    ZRT_THROW(InvalidArgument, "engine: zero_optimization.stage ", stage, " in ", config.source,
              " is not a ZeRO stage; the engine runs stages 0, 1, 2 and 3");
  const auto& zero = config.zero_optimization;
  if (zero.offload_param.device == OffloadDevice::Nvme && zero.offload_param.nvme_path.empty())
    ZRT_THROW(InvalidArgument, "engine: ", config.source,
              ": zero_optimization.offload_param.nvme_path is required with device nvme");
  // The updated shard reaches NVMe from the offloaded optimizer's host shard; an optimizer on
  // the device would have to bring it down first for nothing.
  if (zero.offload_param.device == OffloadDevice::Nvme && zero.offload_optimizer.device == OffloadDevice::None)
    ZRT_THROW(InvalidArgument, "engine: ", config.source,
              ": offload_param.device nvme needs offload_optimizer.device cpu or nvme");
  if (zero.offload_optimizer.device == OffloadDevice::Nvme && zero.offload_optimizer.nvme_path.empty())
    ZRT_THROW(InvalidArgument, "engine: ", config.source,
              ": zero_optimization.offload_optimizer.nvme_path is required with device nvme");
  if (device.kind() != DeviceKind::Host)
    ZRT_THROW(InvalidArgument, "engine: device ", device.name(),
              " is not supported yet; the engine's step runs on the host device");
  if (config.fp16.enabled && config.bf16.enabled)
    ZRT_THROW(InvalidArgument, "engine: ", config.source, " enables both fp16 and bf16");
  dtype = trainingPrecision(config);
  es = dtypeSize(dtype);
  accumulation = static_cast<int>(config.gradient_accumulation_steps);
  if (model.groups.empty()) model.groups.push_back(ParamGroup{});
}

void Engine::Impl::layOut() {
  std::vector<ParamTensor> tensors;
  std::uint64_t trainableAt = 0, frozenAt = 0;
  std::size_t trainableCount = 0, frozenCount = 0;
  moduleParams.resize(model.modules.size());
  for (std::size_t m = 0; m < model.modules.size(); ++m) {
    const ModuleSpec& mod = model.modules[m];
    if (!moduleByName.emplace(mod.name, m).second)
      ZRT_THROW(InvalidArgument, "engine: two modules are named '", mod.name, "'");
    std::set<std::string> names;
    std::uint64_t scratchAt = 0;
    CoordinatedModule range{mod.name, trainableAt, 0, frozenAt, 0};
    for (const ParamSpec& spec : mod.params) {
      const std::string where = "engine: parameter '" + mod.name + "/" + spec.name + "'";
      if (!names.insert(spec.name).second) ZRT_THROW(InvalidArgument, where, " is registered twice");
      if (spec.group < 0 || static_cast<std::size_t>(spec.group) >= model.groups.size())
        ZRT_THROW(InvalidArgument, where, ": group ", spec.group, " does not exist (",
                  model.groups.size(), " groups)");
      if (!spec.init) ZRT_THROW(InvalidArgument, where, " has no initialiser");
      if (spec.dtype && *spec.dtype != dtype)
        ZRT_THROW(InvalidArgument, where, " is registered as ", nameOf(*spec.dtype), " but ",
                  config.source, " trains in ", nameOf(dtype),
                  "; every parameter trains in the config's precision");
      ParamInfo p;
      p.module = m;
      p.spec = &spec;
      p.numel = numelOf(spec);
      if (spec.trainable) {
        p.offset = trainableAt;
        p.tensor = trainableCount++;
        p.scratchOffset = scratchAt;
        trainableAt += p.numel;
        scratchAt += p.numel;
      } else {
        p.offset = frozenAt;
        p.tensor = frozenCount++;
        frozenAt += p.numel;
      }
      (spec.trainable ? range.trainableCount : range.frozenCount) += p.numel;
      moduleParams[m].push_back(params.size());
      params.push_back(p);
      tensors.push_back({mod.name + "/" + spec.name, p.numel, spec.trainable});
    }
    moduleRanges.push_back(std::move(range));
  }
  ModelStateOptions o = modelStateOptions(config, rank);
  o.worldSize = world;
  const OffloadOptimizerConfig& off = config.zero_optimization.offload_optimizer;
  OptimizerSwapperOptions so;
  std::uint64_t shardCount = 0;
  if (off.device == OffloadDevice::Nvme) {
    const ModelStatePlacement planned = placeModelStates(o, trainableAt, frozenAt);
    shardCount = planned.padded.trainableShard;
    const std::uint64_t files = (planned.optimizer.masterWeights ? 1 : 0) + planned.optimizer.moments;
    so.subGroupSize = static_cast<std::uint64_t>(std::max<std::int64_t>(1, config.zero_optimization.sub_group_size));
    so.bufferCount = off.buffer_count;
    so.pipelineRead = off.pipeline_read;
    so.pipelineWrite = off.pipeline_write;
    const std::uint64_t sub = OptimizerSwapper::subGroupElements(shardCount, so.subGroupSize);
    swapBuffers = std::make_unique<offload::PinnedBufferPool>(
        device, static_cast<std::size_t>(std::max(1, off.buffer_count)), sub * 4 * files);
    io = std::make_unique<offload::OffloadEngine>(offload::aioOptionsFrom(config.aio), swapBuffers->iovecs());
    swapSpace = std::make_unique<offload::SwapSpace>(
        std::vector<std::filesystem::path>(off.nvme_path.begin(), off.nvme_path.end()), device.ledger(), rank);
  }
  const OffloadParamConfig& offParam = config.zero_optimization.offload_param;
  if (offParam.device == OffloadDevice::Nvme) {
    if (!io) io = std::make_unique<offload::OffloadEngine>(offload::aioOptionsFrom(config.aio));
    if (!swapSpace || offParam.nvme_path != off.nvme_path)
      paramSwapSpace = std::make_unique<offload::SwapSpace>(
          std::vector<std::filesystem::path>(offParam.nvme_path.begin(), offParam.nvme_path.end()),
          device.ledger(), rank);
  }
  states = std::make_unique<ModelStates>(device, std::move(tensors), o, swapSpace.get(),
                                         io ? io->fileOptions() : offload::FileOpenOptions{},
                                         paramSwapSpace ? paramSwapSpace.get() : swapSpace.get());
  if (offParam.device == OffloadDevice::Nvme) {
    trainableStore = std::make_unique<ParamShardStore>(*io, states->parametersInCpu(), states->parameters(), dtype);
    frozenStore = std::make_unique<ParamShardStore>(*io, states->frozenParametersInCpu(),
                                                    states->frozenParameters(), dtype);
  }
  if (off.device == OffloadDevice::Nvme) {
    std::vector<const offload::SwapFile*> files;
    if (states->masterWeights()) files.push_back(states->masterWeights().swapFile());
    for (const StateBuffer& m : states->moments()) files.push_back(m.swapFile());
    swapper = std::make_unique<OptimizerSwapper>(*io, *swapBuffers, files, shardCount, so);
  }
  if (optimizerOffloaded()) copyStream = device.createStream();
  std::uint64_t widest = 0;
  for (std::size_t m = 0; m < model.modules.size(); ++m) {
    std::uint64_t n = 0;
    for (std::size_t i : moduleParams[m])
      if (params[i].spec->trainable) n += params[i].numel;
    widest = std::max(widest, n);
  }
  // The workspace is not a model state (the ZeRO formulas leave it out, as they leave out
  // PyTorch's .grad before DeepSpeed copies it into a bucket), so it is charged as "other".
  if (widest) workspace = device.allocate(widest * es, MemTag::Other);
  normShard = shardOf(states->trainableLayout().numel, world, rank, kShardAlignElements);
  done.assign(model.modules.size(), 0);
}

void Engine::Impl::initialise() {
  for (const StateBuffer* b : {&states->parameters(), &states->frozenParameters(),
                               &states->parametersInCpu(), &states->frozenParametersInCpu(),
                               &states->gradients(), &states->gradientHostShard(),
                               &states->masterWeights()})
    if (b->data()) std::memset(b->data(), 0, b->bytes());
  for (const StateBuffer& b : states->moments())
    if (b.data()) std::memset(b.data(), 0, b.bytes());
  // With the parameters on NVMe the shards are built in memory once, here, then written out.
  std::vector<char> built[2];
  char* shards[2] = {static_cast<char*>(states->parameters().data()),
                     static_cast<char*>(states->frozenParameters().data())};
  if (trainableStore) {
    const ParamShardStore* stores[2] = {trainableStore.get(), frozenStore.get()};
    for (int k = 0; k < 2; ++k) {
      built[k].assign(stores[k]->count() * es, 0);
      shards[k] = built[k].data();
    }
  }
  std::vector<float> values;
  for (const ParamInfo& p : params) {
    values.assign(p.numel, 0.f);
    p.spec->init(values.data(), p.numel);
    if (stage < 3) {
      char* base = paramBase(p);
      for (std::uint64_t i = 0; i < p.numel; ++i) comm::storeElement(dtype, base, i, values[i]);
      continue;
    }
    // Stage 3 keeps only this rank's piece of each parameter.
    const FlatLayout& layout = p.spec->trainable ? states->trainableLayout() : states->frozenLayout();
    char* shard = shards[p.spec->trainable ? 0 : 1];
    const ShardPiece piece = pieceInShard(p.offset, p.numel, layout.shard);
    for (std::uint64_t i = 0; i < piece.count; ++i)
      comm::storeElement(dtype, shard, piece.inShard + i, values[piece.inTensor + i]);
  }
  const char* trainableShard = stage >= 3 ? shards[0] : paramShard();
  // The master copy starts from the training-dtype values, as a model cast to fp16 would.
  if (states->masterWeights().data()) {
    const ShardRange& s = states->trainableLayout().shard;
    auto* master = static_cast<float*>(states->masterWeights().data());
    for (std::uint64_t i = 0; i < s.count; ++i) master[i] = comm::loadElement(dtype, trainableShard, i);
  } else if (swapper) {  // on NVMe: written sub-group by sub-group, the moments zero
    swapper->fill([&](const OptimizerSwapper::Window& w) {
      for (std::uint64_t i = 0; i < w.count; ++i) w.states[0][i] = comm::loadElement(dtype, trainableShard, w.begin + i);
      for (std::size_t k = 1; k < w.states.size(); ++k) std::fill(w.states[k], w.states[k] + w.count, 0.0f);
    });
    swapper->takeStats();
  }
  if (trainableStore) {
    trainableStore->writeAll(built[0].data());
    frozenStore->writeAll(built[1].data());
  }
}

double Engine::Impl::groupLr(int group, std::int64_t step) const {
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

Engine::Engine(const Config& config, Device& device, comm::Communicator& comm, EngineModel model)
    : impl_(std::make_unique<Impl>(config, device, comm, std::move(model))) {
  // Before the first collective, so a rank that never arrives is reported after the config's
  // time, not the communicator's default; its lanes, duplicated below, inherit it.
  comm.useConfigTimeout(config.zrt.comm_timeout_s);
  Impl& e = *impl_;
  e.validate();
  checkSameRegistration(comm, e.model);
  // Allocation can fail on one rank alone (a smaller device, a bad initialiser): every rank
  // hears of it here, before the bucketers' collective set-up, instead of waiting there.
  std::string failure;
  try {
    e.layOut();
    e.initialise();
    e.scaler = LossScaler::fromConfig(config.fp16);
    e.schedule = LrSchedule::fromConfig(config.scheduler, config.optimizer.lr);
  } catch (const std::exception& ex) {
    failure = ex.what();
  }
  throwIfAnyRankFailed<PeerError>(comm, failure, "engine: set-up failed:");

  std::vector<std::size_t> numels;
  for (const ParamInfo& p : e.params)
    if (p.spec->trainable) numels.push_back(p.numel);
  if (!numels.empty()) {
    auto o = comm::GradientBucketerOptions::fromZeroConfig(config.zero_optimization, e.dtype);
    // The workspace is reused for the next module at once, so gradients are always copied into
    // their bucket on arrival.
    o.contiguousGradients = true;
    o.ledger = &device.ledger();
    o.output = e.gradBase();
    o.device = &device;
    e.bucketer = std::make_unique<comm::GradientBucketer>(comm, numels, o);
    if (e.stage == 3) {
      e.gatherLane = comm.duplicate();
    } else if (e.stage >= 1 && e.world > 1) {
      const std::size_t whole = e.states->trainableLayout().numel;
      // Its own lane where the backend has one, so a gather never queues behind a reduction.
      e.gatherLane = comm.duplicate();
      auto g = comm::AllGatherBucketerOptions::fromZeroConfig(config.zero_optimization, e.dtype);
      g.device = &device;
      g.ledger = &device.ledger();
      e.gatherer = std::make_unique<comm::AllGatherBucketer>(
          e.gatherLane ? *e.gatherLane : comm, std::span<const std::size_t>(&whole, 1), g);
      ZRT_ENFORCE_EQ(e.gatherer->plan().shardCount[0], e.states->trainableLayout().shard.count);
    }
  }
  if (e.stage == 3) {
    const auto& z = config.zero_optimization;
    CoordinatorOptions o;
    o.persistenceThreshold = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_param_persistence_threshold));
    o.maxLiveParameters = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_max_live_parameters));
    o.maxReuseDistance = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_max_reuse_distance));
    o.prefetchBucketSize = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_prefetch_bucket_size));
    o.dtype = e.dtype;
    std::string failure;
    try {
      const auto& offParam = z.offload_param;
      o.stagingBuffers = offParam.buffer_count;
      o.stagingBufferElements = static_cast<std::uint64_t>(std::max<std::int64_t>(1, offParam.buffer_size));
      e.coordinator = std::make_unique<ParamCoordinator>(
          device, e.gatherLane ? *e.gatherLane : comm, e.moduleRanges,
          ShardSource{e.states->parameters().data(), e.states->trainableLayout().shard.count, e.trainableStore.get()},
          ShardSource{e.states->frozenParameters().data(), e.states->frozenLayout().shard.count, e.frozenStore.get()},
          o);
    } catch (const std::exception& ex) {
      failure = ex.what();
    }
    throwIfAnyRankFailed<PeerError>(comm, failure, "engine: stage-3 set-up failed:");
  }
}

Engine::~Engine() = default;

int Engine::stage() const { return impl_->stage; }
DType Engine::precision() const { return impl_->dtype; }
int Engine::accumulationSteps() const { return impl_->accumulation; }
std::size_t Engine::numModules() const { return impl_->model.modules.size(); }
int Engine::moduleIndex(const std::string& name) const {
  auto it = impl_->moduleByName.find(name);
  return it == impl_->moduleByName.end() ? -1 : static_cast<int>(it->second);
}
const std::string& Engine::moduleName(std::size_t module) const { return impl_->model.modules.at(module).name; }
double Engine::lossScale() const { return impl_->scaler.scale(); }
double Engine::gradientSeed() const { return impl_->scaler.scale() / impl_->accumulation; }

void Engine::beginMicroStep() {
  Impl& e = *impl_;
  if (e.inMicro) ZRT_THROW(InvalidArgument, "engine: beginMicroStep twice without endMicroStep");
  if (e.micro >= e.accumulation)
    ZRT_THROW(InvalidArgument, "engine: ", e.accumulation,
              " micro-steps (gradient_accumulation_steps) are done; call step() first");
  e.inMicro = true;
  std::fill(e.done.begin(), e.done.end(), 0);
  e.handedOut = -1;
  // Stages 0/1 add micro-steps up locally and reduce once, in the last; stage 2 reduces every
  // micro-step into the shard, so a rank never holds more than its shard of gradients.
  e.reducing = e.bucketer && (e.stage >= 2 || e.boundaryMicro());
  // With an fp32 accumulator the buckets overwrite the shard and the engine adds it up.
  if (e.reducing) e.bucketer->beginBackward(/*accumulate=*/e.stage >= 2 && e.micro > 0 && !e.accumulator());
  e.microStart = Clock::now();
  if (e.coordinator) e.coordinator->beginPass();
}

std::vector<TensorRef> Engine::parameters(std::size_t module) {
  Impl& e = *impl_;
  if (module >= e.moduleParams.size())
    ZRT_THROW(InvalidArgument, "engine: module ", module, " does not exist (", e.moduleParams.size(),
              " modules)");
  std::vector<TensorRef> out;
  if (!e.coordinator) {
    for (std::size_t i : e.moduleParams[module]) {
      const ParamInfo& p = e.params[i];
      out.push_back({&p.spec->name, &p.spec->shape, e.paramBase(p), e.dtype, p.numel});
    }
    return out;
  }
  const ParamCoordinator::Gathered g = e.coordinator->fetch(module);
  const CoordinatedModule& range = e.moduleRanges[module];
  for (std::size_t i : e.moduleParams[module]) {
    const ParamInfo& p = e.params[i];
    const char* at = p.spec->trainable ? g.trainable + (p.offset - range.trainableBegin) * e.es
                                       : g.frozen + (p.offset - range.frozenBegin) * e.es;
    out.push_back({&p.spec->name, &p.spec->shape, const_cast<char*>(at), e.dtype, p.numel});
  }
  return out;
}

void Engine::release(std::size_t module) {
  Impl& e = *impl_;
  if (module >= e.moduleParams.size())
    ZRT_THROW(InvalidArgument, "engine: module ", module, " does not exist (", e.moduleParams.size(),
              " modules)");
  if (e.coordinator) e.coordinator->release(module);
}

std::vector<TensorRef> Engine::gradients(std::size_t module) {
  Impl& e = *impl_;
  if (module >= e.moduleParams.size())
    ZRT_THROW(InvalidArgument, "engine: module ", module, " does not exist (", e.moduleParams.size(),
              " modules)");
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: gradients() outside a micro-step");
  if (e.handedOut >= 0 && static_cast<std::size_t>(e.handedOut) != module)
    e.misused("module '" + e.moduleName(module) + "' asked for its gradient buffers before module '" +
              e.moduleName(static_cast<std::size_t>(e.handedOut)) + "' called backwardDone");
  e.handedOut = static_cast<int>(module);
  std::vector<TensorRef> out;
  for (std::size_t i : e.moduleParams[module]) {
    const ParamInfo& p = e.params[i];
    void* data = p.spec->trainable ? e.gradientOf(p) : nullptr;
    out.push_back({&p.spec->name, &p.spec->shape, data, e.dtype, p.numel});
  }
  return out;
}

// Hands module m's gradients (in the workspace, or already in place) on: added into the local
// gradient buffer at stages 0/1, into the buckets when this micro-step reduces.
void Engine::Impl::feed(std::size_t m) {
  const auto& ids = moduleParams[m];
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {  // backward order inside the module
    const ParamInfo& p = params[*it];
    if (!p.spec->trainable) continue;
    const char* grad = gradientOf(p);
    if (stage <= 1) {
      char* dst = gradBase() + p.offset * es;
      if (float* acc = accumulator()) {
        widenInto(dtype, grad, acc + p.offset, p.numel, /*add=*/micro > 0);
        if (boundaryMicro())  // the sum is rounded to the dtype once, for the all-reduce
          for (std::uint64_t i = 0; i < p.numel; ++i) comm::storeElement(dtype, dst, i, acc[p.offset + i]);
      } else if (micro == 0) {
        if (grad != dst) std::memcpy(dst, grad, p.numel * es);
      } else {
        comm::sumPair(dtype, grad, dst, p.numel);  // fp32 add, one rounding
      }
      if (reducing) bucketer->gradientReady(p.tensor, dst);
    } else {
      bucketer->gradientReady(p.tensor, grad);
    }
  }
}

void Engine::backwardDone(std::size_t module) {
  Impl& e = *impl_;
  if (module >= e.moduleParams.size())
    ZRT_THROW(InvalidArgument, "engine: module ", module, " does not exist (", e.moduleParams.size(),
              " modules)");
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: backwardDone() outside a micro-step");
  if (e.done[module]) {
    e.misused("module '" + e.moduleName(module) + "' reported its gradients twice in micro-step " +
              std::to_string(e.micro));
    return;
  }
  e.done[module] = 1;
  e.handedOut = -1;
  e.feed(module);
}

// Every rank learns whether any rank misused the API this micro-step, after the collectives
// every rank posted, and all throw the same error.
void Engine::Impl::agreeNoMisuse() {
  const std::string mine = std::exchange(misuse, {});
  throwIfAnyRankFailed<InvalidArgument>(comm, mine, "engine: gradients reported wrongly:");
}

void Engine::endMicroStep() {
  Impl& e = *impl_;
  if (!e.inMicro) ZRT_THROW(InvalidArgument, "engine: endMicroStep without beginMicroStep");
  const double wall = secondsSince(e.microStart);
  for (std::size_t m = 0; m < e.done.size(); ++m) {
    if (e.done[m]) continue;
    bool trains = false;
    for (std::size_t i : e.moduleParams[m]) trains = trains || e.params[i].spec->trainable;
    if (!trains) continue;
    e.misused("module '" + e.moduleName(m) + "' never reported its gradients in micro-step " +
              std::to_string(e.micro));
    // Its buckets still travel (with zeros), so every rank posts the same collectives.
    if (e.gradientsInPlace()) {
      for (std::size_t i : e.moduleParams[m])
        if (e.params[i].spec->trainable) std::memset(e.gradientOf(e.params[i]), 0, e.params[i].numel * e.es);
    } else if (e.workspace) {
      std::memset(e.workspace.data(), 0, e.workspace.bytes());
    }
    e.feed(m);
  }
  // Waits during backward (for a staging buffer) were communication the caller sat through;
  // the rest of the micro-step was the caller's compute.
  double waitedInBackward = e.reducing ? e.bucketer->exposedSeconds() : 0.0;
  if (e.coordinator) {
    const FetchCounts c = e.coordinator->takeCounts();
    waitedInBackward += c.waitedSeconds + c.readWaitSeconds;
    e.fetches.onDemand += c.onDemand;
    e.fetches.prefetched += c.prefetched;
    e.fetches.reused += c.reused;
    e.fetches.readAhead += c.readAhead;
    e.fetches.readWaitSeconds += c.readWaitSeconds;
    const std::string open = e.coordinator->unreleased();
    if (!open.empty()) e.misused(open);
  }
  const auto t0 = Clock::now();
  e.inMicro = false;
  const int thisMicro = e.micro++;
  if (e.reducing) {
    e.reducing = false;
    e.bucketer->finishBackward();
    if (e.stage >= 2 && e.accumulator())
      widenInto(e.dtype, e.gradBase(), e.accumulator(), e.states->trainableLayout().shard.count,
                /*add=*/thisMicro > 0);
  }
  // A parameter read from NVMe that failed on any rank fails the micro-step on every rank (the
  // gathers went on, so nobody waits; the step's values are not used).
  if (e.trainableStore)
    throwIfAnyRankFailed<PeerError>(e.comm, e.coordinator->takeIoFailure(), "engine: reading parameters failed:");
  e.agreeNoMisuse();
  if (e.coordinator) e.coordinator->endPass();
  e.commSeconds += waitedInBackward + secondsSince(t0);
  e.computeSeconds += std::max(0.0, wall - waitedInBackward);
}

void Engine::Impl::runOptimizer(double gradScale) {
  const ShardRange& shard = states->trainableLayout().shard;
  if (shard.count == 0) return;
  if (stage == 1 && optimizerOffloaded()) {  // the reduced shard goes down to the host first
    device.copyAsync(hostShard(), gradBase() + shard.begin * es, shard.count * es, *copyStream);
    copyStream->synchronize();
  }
  if (swapper) {
    swapper->forEach([&](const OptimizerSwapper::Window& w) {
      stepWindow(gradScale, w.begin, w.count, w.states[0], w.states.size() > 1 ? w.states[1] : nullptr,
                 w.states.size() > 2 ? w.states[2] : nullptr);
    });
  } else {
    const auto& moments = states->moments();
    stepWindow(gradScale, 0, shard.count, static_cast<float*>(states->masterWeights().data()),
               moments.empty() ? nullptr : static_cast<float*>(moments[0].data()),
               moments.size() < 2 ? nullptr : static_cast<float*>(moments[1].data()));
  }
}

// Offloaded: the updated shard, written over its gradients in the host shard, goes back up to
// the device (after every rank's optimizer succeeded, so a failure leaves every rank's
// parameters as they were).
void Engine::Impl::copyUpdateUp() {
  const ShardRange& shard = states->trainableLayout().shard;
  if (!optimizerOffloaded() || shard.count == 0) return;
  if (trainableStore) {  // offload_param nvme: the shard goes back to its file (and host part)
    trainableStore->writeAll(hostShard());
    return;
  }
  device.copyAsync(paramShard(), hostShard(), shard.count * es, *copyStream);
  copyStream->synchronize();
}

// The optimizer on elements [begin, begin + count) of the shard, whose fp32 states start at
// `master` and the moments (the whole shard in memory, or one sub-group swapped in).
void Engine::Impl::stepWindow(double gradScale, std::uint64_t begin, std::uint64_t count,
                              float* master, float* moment0, float* moment1) {
  const ShardRange& shard = states->trainableLayout().shard;
  const DType gradType = stepGradientType();
  const char* grads = stepGradients() + begin * dtypeSize(gradType);
  float* param = master ? master : reinterpret_cast<float*>(paramShard()) + begin;
  // With a master copy the updated value is also written in the training dtype: into the
  // device shard, or, offloaded, over the host shard's consumed gradients for the copy back.
  void* copy = master ? (optimizerOffloaded() ? hostShard() : paramShard()) + begin * es : nullptr;
  const OptimizerConfig& oc = config.optimizer;
  // While the swapper streams sub-groups, a core is left to the I/O threads: an optimizer on
  // every core starves the completions it waits for (zrt-offload-bench --threads shows it).
  optim::StepOptions stepOptions;
  if (swapper) stepOptions.threads = OptimizerSwapper::optimizerThreads();
  // What changes with the step and the group, the same for every optimizer.
  auto perStep = [&](auto& h, int group) {
    h.lr = groupLr(group, taken);
    h.weightDecay = groupWeightDecay(group);
    h.step = taken + 1;  // taken steps only: a skipped step does not advance bias correction
    h.gradScale = gradScale;
  };
  for (const ParamInfo& p : params) {
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
      optim::sgdStep(h, s, lo - begin, hi - lo, stepOptions);
    } else {
      optim::AdamHyper h;
      perStep(h, g);
      h.beta1 = oc.beta1;
      h.beta2 = oc.beta2;
      h.eps = oc.eps;
      h.decoupledWeightDecay = oc.adam_w_mode;
      optim::AdamState s{param, moment0, moment1, grads, gradType, copy, dtype, count};
      optim::adamStep(h, s, lo - begin, hi - lo, stepOptions);
    }
  }
}

StepReport Engine::step() {
  Impl& e = *impl_;
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
  NormPart mine;
  if (e.bucketer) {
    // Stages 0/1: this rank's part of the whole (reduced) buffer; 2/3: its shard.
    const char* g = e.stage <= 1 ? e.gradBase() + e.normShard.begin * e.es : e.stepGradients();
    mine = normPart(e.stepGradientType(), g, e.normShard.valid);  // padding past the real elements is not ours to read at stages 0/1
  }
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
    // up, so every rank keeps the step's old parameters.
    if (e.swapper) {
      std::string failure;
      try {
        e.runOptimizer(optim::gradMultiplier(scale, clip));
      } catch (const std::exception& ex) {
        failure = ex.what();
      }
      throwIfAnyRankFailed<PeerError>(e.comm, failure, "engine: the optimizer step failed:");
    } else {
      e.runOptimizer(optim::gradMultiplier(scale, clip));
    }
    if (e.trainableStore) {
      // A write that fails on one rank leaves that rank's shard file half updated: every rank
      // stops here with the error (file and offset), before any gathers from the new shards.
      const auto tw = Clock::now();
      std::string failure;
      try {
        e.copyUpdateUp();
      } catch (const std::exception& ex) {
        failure = ex.what();
      }
      throwIfAnyRankFailed<PeerError>(e.comm, failure, "engine: writing the updated parameters to NVMe failed:");
      r.ioSeconds += secondsSince(tw);
    } else {
      e.copyUpdateUp();
    }
    if (e.swapper) r.ioSeconds += e.swapper->takeStats().ioWaitSeconds;
    ++e.taken;
    if (e.gatherer) {
      const auto tg = Clock::now();
      char* full = static_cast<char*>(e.states->parameters().data());
      const void* shard = full + e.states->trainableLayout().shard.begin * e.es;
      void* fulls = full;
      e.gatherer->start(std::span<const void* const>(&shard, 1), std::span<void* const>(&fulls, 1));
      e.gatherer->finish();
      commSeconds += secondsSince(tg);
    }
    if (e.coordinator) {
      const auto tg = Clock::now();
      e.coordinator->refresh();  // the shards changed: every gathered copy is stale
      commSeconds += secondsSince(tg);
    }
  }
  e.scaler.update(overflow);
  e.micro = 0;
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
  const ParamInfo& p = e.params.at(e.moduleParams.at(module).at(param));
  std::vector<float> out(p.numel);
  std::vector<char> gathered;
  const char* base = e.stage < 3 ? e.paramBase(p) : nullptr;
  if (!base) {  // stage 3: gather the parameter's pieces from every rank's shard
    const FlatLayout& layout = p.spec->trainable ? e.states->trainableLayout() : e.states->frozenLayout();
    const StateBuffer& shard = p.spec->trainable ? e.states->parameters() : e.states->frozenParameters();
    const char* local = static_cast<const char*>(shard.data());
    std::vector<char> read;  // offload_param nvme: the shard, read whole
    if (ParamShardStore* store = p.spec->trainable ? e.trainableStore.get() : e.frozenStore.get()) {
      read.resize(store->count() * e.es + 1);
      std::string failure;
      try {
        store->readAll(read.data());
      } catch (const std::exception& ex) {
        failure = ex.what();
      }
      throwIfAnyRankFailed<PeerError>(e.comm, failure, "engine: reading parameters failed:");
      local = read.data();
    }
    const GatherPieces g = gatherPieces(p.offset, p.numel, layout.shard.count, e.world, e.rank);
    gathered.resize(p.numel * e.es);
    e.comm.allGather(local + g.sendOffset * e.es, gathered.data(), g.counts, e.dtype, g.displs);
    base = gathered.data();
  }
  for (std::uint64_t i = 0; i < p.numel; ++i) out[i] = comm::loadElement(e.dtype, base, i);
  return out;
}

// ---- Checkpoints: the engine as runtime/checkpoint/ sees it (engine.h, "Checkpoints"). ----

struct CheckpointAccess {
  // offload_param nvme: the shards, read into memory for one save or load.
  struct ParamCopies {
    std::vector<char> shards[2];
  };

  static checkpoint::EngineView view(Engine& engine, ParamCopies& copies) {
    Engine::Impl& e = *engine.impl_;
    checkpoint::EngineView v;
    ParamShardStore* stores[2] = {e.trainableStore.get(), e.frozenStore.get()};
    if (stores[0]) {
      std::string failure;
      try {
        for (int k = 0; k < 2; ++k) {
          copies.shards[k].resize(stores[k]->count() * e.es + 1);
          stores[k]->readAll(copies.shards[k].data());
          v.paramShards[k] = copies.shards[k].data();
        }
      } catch (const std::exception& ex) {
        failure = ex.what();
      }
      throwIfAnyRankFailed<PeerError>(e.comm, failure, "checkpoint: reading parameters from NVMe failed:");
    }
    v.comm = &e.comm;
    v.world = e.world;
    v.rank = e.rank;
    v.stage = e.stage;
    v.dtype = e.dtype;
    v.states = e.states.get();
    v.io = e.io.get();
    for (const ParamInfo& p : e.params)
      v.params.push_back({e.moduleName(p.module), p.spec->name, p.spec->shape, p.spec->trainable, p.spec->group,
                          p.offset, p.numel});
    const OptimizerType type = e.states->options().optimizer;
    v.optimizer = type == OptimizerType::SGD ? "sgd" : type == OptimizerType::AdamW ? "adamw" : "adam";
    if (e.states->moments().size() == 2) v.momentNames = {"exp_avg", "exp_avg_sq"};
    if (e.states->moments().size() == 1) v.momentNames = {"momentum_buffer"};
    v.scaler = &e.scaler;
    v.attempted = &e.attempted;
    v.taken = &e.taken;
    v.micro = e.micro;
    v.accumulation = e.accumulation;
    v.inMicro = e.inMicro;
    if (e.coordinator)
      v.parametersChanged = [&e, &copies] {
        if (e.trainableStore) {
          e.trainableStore->writeAll(copies.shards[0].data());
          e.frozenStore->writeAll(copies.shards[1].data());
        }
        e.coordinator->refresh();
      };
    return v;
  }
};

void Engine::save(const std::string& dir, const std::string& tag) {
  save(dir, tag, nlohmann::json::object());
}

void Engine::save(const std::string& dir, const std::string& tag, const nlohmann::json& metadata) {
  CheckpointAccess::ParamCopies copies;
  checkpoint::save(CheckpointAccess::view(*this, copies), dir, tag, metadata);
}

void Engine::load(const std::string& dir, const std::string& tag) {
  CheckpointAccess::ParamCopies copies;
  checkpoint::load(CheckpointAccess::view(*this, copies), dir, tag);
}

void Engine::loadWeights(const std::string& path) { loadWeights(path, {}, {}); }

void Engine::loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing) {
  loadWeights(path, mayBeMissing, {});
}

void Engine::loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing,
                         const std::function<std::string(const std::string&)>& rename) {
  CheckpointAccess::ParamCopies copies;
  checkpoint::loadWeights(CheckpointAccess::view(*this, copies), path, mayBeMissing, rename);
}

}  // namespace zrt
