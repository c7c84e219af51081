// The Engine's private parts, shared by the files that implement it:
//   engine_assembly.cpp  builds the parts from the config and the layout, once;
//   engine.cpp           the micro-step and step loop, which asks the parts;
//   shard_optimizer.cpp  the optimizer on this rank's shard;
//   engine_checkpoint.cpp the checkpoint view (runtime/checkpoint/engine_view.h).
// The parts: the model states (and, offloaded, the swap spaces, the I/O engine, the optimizer
// swapper and the parameter shard stores), this rank's gradients (RankGradients, with the
// stage's GradientPolicy) and where the parameters live (the stage's ParameterHome).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/caller_label.h"
#include "comm/communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "offload/swap_space.h"
#include "partition/model_states.h"
#include "partition/param_store.h"
#include "runtime/engine.h"
#include "runtime/engine_layout.h"
#include "runtime/loss_scaler.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer_state_home.h"
#include "runtime/optimizer_swapper.h"
#include "runtime/rank_gradients.h"
#include "runtime/stage_policy.h"

namespace zrt {

struct Engine::Impl {
  using Clock = std::chrono::steady_clock;

  Impl(const Config& c, Device& d, comm::Communicator& cm, comm::Communicator* data, EngineModel m)
      : config(c), device(d), comm(cm), dataComm(data), model(std::move(m)) {}

  Config config;
  Device& device;
  comm::Communicator& comm;  // agreements; also the model's data without dataComm
  comm::Communicator* dataComm;  // the model's data (buckets, gathers), when given
  EngineModel model;
  int world = 1;
  int rank = 0;
  int stage = 0;
  DType dtype = DType::F32;
  std::size_t es = 4;
  int accumulation = 1;
  ModelLayout layout;

  // ---- The parts (engine_assembly.cpp), in the order they are built and must die. ----
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
  std::unique_ptr<OptimizerStateHome> optimizerState;  // in memory, or through the swapper
  std::unique_ptr<Stream> copyStream;  // offloaded optimizer: host <-> device copies
  // Where the host cannot touch device memory: the set-up's copies and the optimizer's kernels.
  std::unique_ptr<Stream> kernelStream;
  // There, or with a data communicator that takes device memory only, the communicator the
  // gradient buckets post to, through staging buffers; it outlives them.
  std::unique_ptr<comm::Communicator> stagedComm;
  std::unique_ptr<RankGradients> gradients;
  std::unique_ptr<comm::Communicator> gatherLane;  // outlives the parameter home that posts to it
  std::unique_ptr<comm::Communicator> stagedLane;  // the gather lane staged, as stagedComm
  std::unique_ptr<ParameterHome> parameters;
  LossScaler scaler;
  LrSchedule schedule = LrSchedule::fromConfig(SchedulerConfig{}, 0.0);

  // ---- Per step and micro-step (engine.cpp). ----
  int micro = 0;  // micro-steps finished in this step
  bool inMicro = false;
  std::vector<char> done;
  // How the API was misused in this micro-step: each kind seen, and the first one's detail.
  enum Misuse : unsigned { kOutOfOrder = 1, kReportedTwice = 2, kNeverReported = 4, kUnreleased = 8 };
  unsigned misuseKinds = 0;
  std::string misuse;
  int handedOut = -1;  // module whose gradients are in the workspace
  std::int64_t attempted = 0;
  std::int64_t taken = 0;
  std::vector<double> lrOverride;  // setLearningRates: one per group, in place of the schedule
  int skippedInRow = 0;            // fp32/bf16 steps skipped for inf/NaN since the last taken one
  double computeSeconds = 0, commSeconds = 0;
  FetchCounts fetches;  // stage 3, this step
  Clock::time_point microStart;

  bool optimizerOffloaded() const { return static_cast<bool>(states->gradientHostShard()); }
  const std::string& moduleName(std::size_t m) const { return model.modules[m].name; }
  void checkModule(std::size_t module) const;

  // engine_assembly.cpp
  void validate();
  void layOut();
  void initialise();
  void connect();  // the collective parts: buckets, gather lane, parameter home
  // engine.cpp
  void misused(Misuse kind, std::string what) {
    misuseKinds |= kind;
    if (misuse.empty()) misuse = std::move(what);
  }
  void agreeNoMisuse();
  // After a step: says so when fp32/bf16 gradients were not finite, and throws after
  // zrt.max_skipped_steps such steps in a row.
  void noteSkips(bool skipped, std::int64_t step);
  // Each public call that may post collectives names itself for the hang reports
  // (comm/caller_label.h): "Engine::parameters(module 'h.3'), micro-step 7 of step 2".
  std::string callLabel(const char* call) const;
  std::string callLabel(const char* call, std::size_t module) const;
  std::string when() const;
  static comm::CallerLabel enter(std::string label);
  // shard_optimizer.cpp
  double groupLr(int group, std::int64_t step) const;
  double groupWeightDecay(int group) const;
  void runOptimizer(double gradScale);
  void copyUpdateUp();
  void stepWindow(const GradientShard& grads, double gradScale, std::uint64_t begin, std::uint64_t count,
                  float* master, float* moment0, float* moment1);
};

}  // namespace zrt
