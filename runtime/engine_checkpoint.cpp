// The Engine as runtime/checkpoint/ sees it (engine.h, "Checkpoints"): a view of its layout,
// model states and counters (runtime/checkpoint/engine_view.h), built for one save or load.
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/collective_failure.h"
#include "runtime/engine.h"
#include "runtime/engine_impl.h"

namespace zrt {

struct CheckpointAccess {
  // offload_param nvme: the shards, read into memory for one save or load. Where the host cannot
  // touch device memory (host-strict, a GPU): each device-resident state, copied down through the
  // engine's kernel stream (in order after the step's kernels) for one save or load.
  struct ParamCopies {
    std::vector<char> shards[2];
    struct Down {
      void* device = nullptr;
      std::vector<char> host;
    };
    std::vector<Down> down;
  };

  // Copies every model state placed in device memory down into `copies` and points the view at
  // the copies; a load's parametersChanged copies them back up.
  static void copyDeviceStatesDown(Engine::Impl& e, checkpoint::EngineView& v, ParamCopies& copies) {
    const ModelStates& s = *e.states;
    std::vector<const StateBuffer*> buffers = {&s.parameters(), &s.frozenParameters(), &s.masterWeights()};
    for (const StateBuffer& m : s.moments()) buffers.push_back(&m);
    for (const StateBuffer* b : buffers) {
      if (!b->data() || b->place() != MemPlace::Device || b->bytes() == 0) continue;
      ParamCopies::Down& d = copies.down.emplace_back();
      d.device = b->data();
      d.host.resize(b->bytes());
      e.device.copyAsync(d.host.data(), d.device, d.host.size(), *e.kernelStream);
    }
    e.kernelStream->synchronize();
    for (ParamCopies::Down& d : copies.down) v.hostCopies[d.device] = d.host.data();
  }

  static void copyDeviceStatesUp(Engine::Impl& e, ParamCopies& copies) {
    if (copies.down.empty()) return;
    for (ParamCopies::Down& d : copies.down)
      e.device.copyAsync(d.device, d.host.data(), d.host.size(), *e.kernelStream);
    e.kernelStream->synchronize();
  }

  static checkpoint::EngineView view(Engine& engine, ParamCopies& copies) {
    Engine::Impl& e = *engine.impl_;
    checkpoint::EngineView v;
    ParamShardStore* stores[2] = {e.trainableStore.get(), e.frozenStore.get()};
    if (stores[0]) {
      onEveryRankOrNone<PeerError>(e.comm, "checkpoint: reading parameters from NVMe failed:", [&] {
        for (int k = 0; k < 2; ++k) {
          copies.shards[k].resize(stores[k]->count() * e.es + 1);
          stores[k]->readAll(copies.shards[k].data());
          v.paramShards[k] = copies.shards[k].data();
        }
      });
    }
    v.comm = &e.comm;
    v.world = e.world;
    v.rank = e.rank;
    v.stage = e.stage;
    v.dtype = e.dtype;
    v.states = e.states.get();
    v.io = e.io.get();
    for (const ParamInfo& p : e.layout.params)
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
    if (!e.device.hostReadsDeviceMemory()) copyDeviceStatesDown(e, v, copies);
    if (e.parameters->keepsGatheredCopies() || !copies.down.empty())
      v.parametersChanged = [&e, &copies] {
        copyDeviceStatesUp(e, copies);
        if (!e.parameters->keepsGatheredCopies()) return;
        if (e.trainableStore) {
          e.trainableStore->writeAll(copies.shards[0].data());
          e.frozenStore->writeAll(copies.shards[1].data());
        }
        e.parameters->publishUpdate();
      };
    return v;
  }
};

void Engine::save(const std::string& dir, const std::string& tag) {
  save(dir, tag, nlohmann::json::object());
}

void Engine::save(const std::string& dir, const std::string& tag, const nlohmann::json& metadata) {
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("save"));
  CheckpointAccess::ParamCopies copies;
  checkpoint::save(CheckpointAccess::view(*this, copies), dir, tag, metadata);
}

void Engine::load(const std::string& dir, const std::string& tag) {
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("load"));
  CheckpointAccess::ParamCopies copies;
  checkpoint::load(CheckpointAccess::view(*this, copies), dir, tag);
}

void Engine::loadWeights(const std::string& path) { loadWeights(path, {}, {}); }

void Engine::loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing) {
  loadWeights(path, mayBeMissing, {});
}

void Engine::loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing,
                         const std::function<std::string(const std::string&)>& rename) {
  const comm::CallerLabel label = Impl::enter(impl_->callLabel("loadWeights"));
  CheckpointAccess::ParamCopies copies;
  checkpoint::loadWeights(CheckpointAccess::view(*this, copies), path, mayBeMissing, rename);
}

}  // namespace zrt
