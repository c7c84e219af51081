// What the checkpoint code sees of an Engine: its communicator, its layout (the flat buffers'
// parameters in registration order and this rank's buffers), and the few scalars a resumed run
// needs (step counters, loss scaler). The Engine builds one on demand
// (runtime/engine_checkpoint.cpp); nothing here owns anything.
// Thread-safety: as the Engine: the training loop's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "offload/offload_engine.h"
#include "partition/model_states.h"
#include "runtime/loss_scaler.h"

namespace zrt::checkpoint {

struct EngineView {
  struct Param {
    std::string module;
    std::string name;
    std::vector<std::int64_t> shape;
    bool trainable = true;
    int group = 0;
    std::uint64_t offset = 0;  // in the trainable or the frozen flat buffer
    std::uint64_t numel = 0;
  };

  comm::Communicator* comm = nullptr;
  int world = 1;
  int rank = 0;
  int stage = 0;
  DType dtype = DType::F32;
  const ModelStates* states = nullptr;
  // The engine's I/O engine when states live in swap files on NVMe (offload_optimizer nvme):
  // those are copied file to file through it, a chunk at a time.
  offload::OffloadEngine* io = nullptr;
  std::vector<Param> params;
  // offload_param nvme: the parameter shards (trainable, frozen) read into memory for this save
  // or load, in place of states->parameters()/frozenParameters(), which are then swap files; a
  // load writes them back in parametersChanged.
  char* paramShards[2] = {nullptr, nullptr};
  // Device memory the host cannot touch (host-strict, a GPU): each such state's host copy for
  // this save or load, by the state's device address; the checkpoint code reads and writes the
  // copy, and a load's parametersChanged copies it back up.
  std::map<const void*, char*> hostCopies;
  std::string optimizer;                 // "adam", "adamw", "sgd"
  std::vector<std::string> momentNames;  // one per states->moments()
  LossScaler* scaler = nullptr;
  std::int64_t* attempted = nullptr;
  std::int64_t* taken = nullptr;
  int micro = 0;  // micro-steps done in the current step
  int accumulation = 1;
  bool inMicro = false;
  // Called (collectively) after the model states were overwritten: device states are copied
  // back up from hostCopies, and stage 3 drops its gathered copies.
  std::function<void()> parametersChanged;
};

}  // namespace zrt::checkpoint
