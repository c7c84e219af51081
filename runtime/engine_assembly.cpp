// The Engine as an assembler: from the config and the model's layout it builds, once, the model
// states and what they need offloaded (swap spaces, the I/O engine, the optimizer swapper, the
// parameter shard stores), this rank's gradients with the stage's GradientPolicy, and the
// stage's ParameterHome with its collective parts (buckets, gather lane, coordinator). The stage
// is decided here, where the parts are chosen, and so is where the optimizer's states live
// (OptimizerStateHome: in memory or through the swapper); the parameters' NVMe stores are still
// tested where they are used (engine.cpp's step, engine_checkpoint.cpp), and so is the swapper
// once, to write the initial states (initialise()).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "comm/staged_communicator.h"
#include "core/element_arithmetic.h"
#include "core/error.h"
#include "core/shard.h"
#include "offload/aio_options.h"
#include "partition/param_coordinator.h"
#include "runtime/collective_failure.h"
#include "runtime/engine_impl.h"

namespace zrt {

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
  // The Engine's own agreements (set-up, overflow, step reports) are collectives over host
  // memory; a device backend carries the model's data beside a host one.
  if (!comm.takesHostMemory())
    ZRT_THROW(InvalidArgument, "engine: the communicator's backend ", comm.backendName(),
              " takes device memory only; hand the Engine a host backend (MPI) for its agreements "
              "and this one as its data communicator");
  if (dataComm && (dataComm->size() != world || dataComm->rank() != rank))
    ZRT_THROW(InvalidArgument, "engine: the data communicator (", dataComm->backendName(), ") is rank ",
              dataComm->rank(), " of ", dataComm->size(), " but the communicator (", comm.backendName(),
              ") is rank ", rank, " of ", world, "; both must span the same ranks in the same order");
  if (config.fp16.enabled && config.bf16.enabled)
    ZRT_THROW(InvalidArgument, "engine: ", config.source, " enables both fp16 and bf16");
  dtype = trainingPrecision(config);
  es = dtypeSize(dtype);
  accumulation = static_cast<int>(config.gradient_accumulation_steps);
  if (model.groups.empty()) model.groups.push_back(ParamGroup{});
}

void Engine::Impl::layOut() {
  layout = ModelLayout::of(model, dtype, config.source);
  ModelStateOptions o = modelStateOptions(config, rank);
  o.worldSize = world;
  const OffloadOptimizerConfig& off = config.zero_optimization.offload_optimizer;
  OptimizerSwapperOptions so;
  std::uint64_t shardCount = 0;
  if (off.device == OffloadDevice::Nvme) {
    const ModelStatePlacement planned = placeModelStates(o, layout.trainableNumel, layout.frozenNumel);
    shardCount = planned.padded.trainableShard;
    const std::uint64_t files = (planned.optimizer.masterWeights ? 1 : 0) + planned.optimizer.moments;
    so.subGroupSize = static_cast<std::uint64_t>(std::max<std::int64_t>(1, config.zero_optimization.sub_group_size));
    so.bufferCount = off.buffer_count;
    so.pipelineRead = off.pipeline_read;
    so.pipelineWrite = off.pipeline_write;
    const std::uint64_t sub = OptimizerSwapper::subGroupElements(shardCount, so.subGroupSize);
    swapBuffers = std::make_unique<offload::PinnedBufferPool>(
        device, OptimizerSwapper::buffersUsed(shardCount, so.subGroupSize, off.buffer_count), sub * 4 * files);
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
  states = std::make_unique<ModelStates>(device, std::move(layout.tensors), o, swapSpace.get(),
                                         io ? io->fileOptions() : offload::FileOpenOptions{},
                                         paramSwapSpace ? paramSwapSpace.get() : swapSpace.get());
  if (offParam.device == OffloadDevice::Nvme) {
    if (const std::uint64_t inMaster = states->placement().parametersInMaster)
      trainableStore = std::make_unique<ParamShardStore>(*io, states->parametersInCpu(),
                                                         *states->masterWeights().swapFile(), inMaster, dtype);
    else
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
  optimizerState = swapper ? statesSwapped(*swapper)
                           : statesInMemory(*states, states->trainableLayout().shard.count);
  if (optimizerOffloaded()) copyStream = device.createStream();
  // The part of the gradients whose norm this rank adds up: its shard at every stage (at stages
  // 0/1 every rank holds all gradients, but each adds only its part).
  const ShardRange normShard = shardOf(states->trainableLayout().numel, world, rank, kShardAlignElements);
  gradients = std::make_unique<RankGradients>(device, layout, *states, dtype, normShard,
                                              stage <= 1 ? replicatedGradients(/*copiesShardDown=*/stage == 1)
                                                         : shardedGradients());
  done.assign(model.modules.size(), 0);
}

void Engine::Impl::initialise() {
  // Where the host cannot touch device memory, device buffers are cleared and filled by copies
  // on kernelStream from host memory built here.
  const bool deviceClean = !device.hostReadsDeviceMemory();
  if (deviceClean) kernelStream = device.createStream();
  auto clear = [&](const StateBuffer& b) {
    if (!b.data()) return;
    if (deviceClean && b.place() == MemPlace::Device)
      device.memsetAsync(b.data(), 0, b.bytes(), *kernelStream);
    else
      std::memset(b.data(), 0, b.bytes());
  };
  for (const StateBuffer* b : {&states->parameters(), &states->frozenParameters(),
                               &states->parametersInCpu(), &states->frozenParametersInCpu(),
                               &states->gradients(), &states->gradientHostShard(),
                               &states->masterWeights()})
    clear(*b);
  for (const StateBuffer& b : states->moments()) clear(b);
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
  } else if (deviceClean) {
    const StateBuffer* buffers[2] = {&states->parameters(), &states->frozenParameters()};
    for (int k = 0; k < 2; ++k) {
      built[k].assign(buffers[k]->bytes(), 0);
      shards[k] = built[k].data();
    }
  }
  // The range of each flat buffer this rank's parameter buffer holds: all of it at stages 0-2,
  // its shard at stage 3.
  auto kept = [&](const FlatLayout& l) { return stage < 3 ? ShardRange{0, l.padded, l.numel} : l.shard; };
  const ShardRange keptRange[2] = {kept(states->trainableLayout()), kept(states->frozenLayout())};
  std::vector<float> values;
  for (const ParamInfo& p : layout.params) {
    values.assign(p.numel, 0.f);
    p.spec->init(values.data(), p.numel);
    const int k = p.spec->trainable ? 0 : 1;
    const ShardPiece piece = pieceInShard(p.offset, p.numel, keptRange[k]);
    for (std::uint64_t i = 0; i < piece.count; ++i)
      zrt::storeElement(dtype, shards[k], piece.inShard + i, values[piece.inTensor + i]);
  }
  const char* trainableShard = shards[0] + (states->trainableLayout().shard.begin - keptRange[0].begin) * es;
  // The master copy starts from the training-dtype values, as a model cast to fp16 would.
  std::vector<float> builtMaster;
  if (states->masterWeights().data()) {
    const ShardRange& s = states->trainableLayout().shard;
    auto* master = static_cast<float*>(states->masterWeights().data());
    if (deviceClean && states->masterWeights().place() == MemPlace::Device) {
      builtMaster.resize(s.count);
      master = builtMaster.data();
    }
    for (std::uint64_t i = 0; i < s.count; ++i) master[i] = zrt::loadElement(dtype, trainableShard, i);
  } else if (swapper) {  // on NVMe: written sub-group by sub-group, the moments zero
    swapper->fill([&](const OptimizerSwapper::Window& w) {
      for (std::uint64_t i = 0; i < w.count; ++i) w.states[0][i] = zrt::loadElement(dtype, trainableShard, w.begin + i);
      for (std::size_t k = 1; k < w.states.size(); ++k) std::fill(w.states[k], w.states[k] + w.count, 0.0f);
    });
    swapper->takeStats();
  }
  if (trainableStore) {
    trainableStore->writeAll(built[0].data());
    frozenStore->writeAll(built[1].data());
  } else if (deviceClean) {
    device.copyAsync(states->parameters().data(), built[0].data(), built[0].size(), *kernelStream);
    device.copyAsync(states->frozenParameters().data(), built[1].data(), built[1].size(),
                     *kernelStream);
    if (!builtMaster.empty())
      device.copyAsync(states->masterWeights().data(), builtMaster.data(), builtMaster.size() * 4,
                       *kernelStream);
  }
  if (deviceClean) kernelStream->synchronize();  // the host buffers die here
}

void Engine::Impl::connect() {
  std::vector<std::size_t> numels;
  for (const ParamInfo& p : layout.params)
    if (p.spec->trainable) numels.push_back(p.numel);
  comm::Communicator& backend = dataComm ? *dataComm : comm;
  ParameterParts parts{
      &layout, states.get(), dtype, &backend, {trainableStore.get(), frozenStore.get()}};
  if (!device.hostReadsDeviceMemory()) parts.device = &device;
  // A host backend (MPI) on a device whose memory the host cannot touch, and a backend that takes
  // device memory only (NCCL) handed an offloaded shard, get their buffers through staging.
  const bool staged = !device.hostReadsDeviceMemory() || !backend.takesHostMemory();
  if (staged) {
    stagedComm = std::make_unique<comm::StagedCommunicator>(device, backend);
    parts.comm = stagedComm.get();  // stage 3's value() gathers from the shard
  }
  comm::Communicator& bucketComm = staged ? *stagedComm : backend;
  // The parameter gathers: on their own lane where the backend has one, so a gather never queues
  // behind a reduction; else behind the buckets, in one posting order.
  comm::Communicator* lane = &bucketComm;
  if (stage == 3 || (stage >= 1 && world > 1 && !numels.empty())) {
    gatherLane = backend.duplicate();
    if (gatherLane && staged) {
      stagedLane = std::make_unique<comm::StagedCommunicator>(device, *gatherLane);
      lane = stagedLane.get();
    } else if (gatherLane) {
      lane = gatherLane.get();
    }
  }
  std::unique_ptr<comm::AllGatherBucketer> gatherer;
  if (!numels.empty()) {
    auto o = comm::GradientBucketerOptions::fromZeroConfig(config.zero_optimization, dtype);
    // The workspace is reused for the next module at once, so gradients are always copied into
    // their bucket on arrival.
    o.contiguousGradients = true;
    o.ledger = &device.ledger();
    o.output = gradients->reduceTarget();
    o.device = &device;
    gradients->connect(std::make_unique<comm::GradientBucketer>(bucketComm, numels, o));
    if (stage < 3 && stage >= 1 && world > 1) {
      const std::size_t whole = states->trainableLayout().numel;
      auto g = comm::AllGatherBucketerOptions::fromZeroConfig(config.zero_optimization, dtype);
      g.device = &device;
      g.ledger = &device.ledger();
      gatherer = std::make_unique<comm::AllGatherBucketer>(
          *lane, std::span<const std::size_t>(&whole, 1), g);
      ZRT_ENFORCE_EQ(gatherer->plan().shardCount[0], states->trainableLayout().shard.count);
    }
  }
  if (stage < 3) {
    parameters = wholeParameters(parts, std::move(gatherer));
    return;
  }
  const auto& z = config.zero_optimization;
  CoordinatorOptions o;
  o.persistenceThreshold = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_param_persistence_threshold));
  o.maxLiveParameters = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_max_live_parameters));
  o.maxReuseDistance = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_max_reuse_distance));
  o.prefetchBucketSize = static_cast<std::uint64_t>(std::max<std::int64_t>(0, z.stage3_prefetch_bucket_size));
  o.dtype = dtype;
  onEveryRankOrNone<PeerError>(comm, "engine: stage-3 set-up failed:", [&] {
    const auto& offParam = z.offload_param;
    o.stagingBuffers = offParam.buffer_count;
    o.stagingBufferElements = static_cast<std::uint64_t>(std::max<std::int64_t>(1, offParam.buffer_size));
    parameters = partitionedParameters(
        parts, std::make_unique<ParamCoordinator>(
                   device, *lane, layout.moduleRanges,
                   ShardSource{states->parameters().data(), states->trainableLayout().shard.count, trainableStore.get()},
                   ShardSource{states->frozenParameters().data(), states->frozenLayout().shard.count, frozenStore.get()},
                   o));
  });
}

Engine::Engine(const Config& config, Device& device, comm::Communicator& comm, EngineModel model)
    : Engine(config, device, comm, nullptr, std::move(model)) {}

Engine::Engine(const Config& config, Device& device, comm::Communicator& comm, comm::Communicator& data,
               EngineModel model)
    : Engine(config, device, comm, &data, std::move(model)) {}

Engine::Engine(const Config& config, Device& device, comm::Communicator& comm, comm::Communicator* data,
               EngineModel model)
    : impl_(std::make_unique<Impl>(config, device, comm, data, std::move(model))) {
  const comm::CallerLabel label = Impl::enter("Engine::Engine() (set-up)");
  // Before the first collective, so a rank that never arrives is reported after the config's
  // time, not the communicator's default; its lanes, duplicated below, inherit it.
  comm.useConfigTimeout(config.zrt.comm_timeout_s);
  comm.useConfigDivergenceTimeout(config.zrt.divergence_timeout_s);
  if (data) {
    data->useConfigTimeout(config.zrt.comm_timeout_s);
    data->useConfigDivergenceTimeout(config.zrt.divergence_timeout_s);
  }
  Impl& e = *impl_;
  e.validate();
  checkSameRegistration(comm, e.model);
  // Allocation can fail on one rank alone (a smaller device, a bad initialiser): every rank
  // hears of it here, before the bucketers' collective set-up, instead of waiting there.
  onEveryRankOrNone<PeerError>(comm, "engine: set-up failed:", [&] {
    e.layOut();
    e.initialise();
    e.scaler = LossScaler::fromConfig(config.fp16);
    e.schedule = LrSchedule::fromConfig(config.scheduler, config.optimizer.lr);
  });
  e.connect();
}

Engine::~Engine() {
  if (!impl_) return;  // moved from
  // A peer that waits for this rank in a collective learns that it is closing (the ranks
  // diverged) instead of waiting out the timeout.
  const comm::CallerLabel label(impl_->callLabel("~Engine") + " (closing the engine)", comm::CallKind::Closing);
  if (impl_->inMicro) comm::CallerLabel::endSpan();
  impl_.reset();
}

}  // namespace zrt
