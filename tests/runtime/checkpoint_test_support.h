// Shared pieces of the checkpoint tests: a temporary directory every rank of a communicator
// sees (rank 0 makes it, all learn its name, rank 0 removes it), a sub-world of the first n
// ranks (the resharding tests save on some ranks and load on others), the engine config, and
// a whole-state comparison of two checkpoints through the reader.
#pragma once

#include <doctest/doctest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

namespace zrt::test {

// Made by rank 0 of `comm`, removed by it once every rank is past.
class SharedTempDir {
 public:
  explicit SharedTempDir(MPI_Comm comm = testComm()) : comm_(comm) {
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    char buf[4096] = {};
    if (rank == 0) {
      std::string t = (std::filesystem::temp_directory_path() / "zrt-ckpt-test-XXXXXX").string();
      std::strncpy(buf, t.c_str(), sizeof buf - 1);
      if (!mkdtemp(buf)) buf[0] = '\0';
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, comm_);
    path_ = buf;
    REQUIRE(!path_.empty());
  }
  ~SharedTempDir() {
    MPI_Barrier(comm_);
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    std::error_code ec;
    if (rank == 0) std::filesystem::remove_all(path_, ec);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  MPI_Comm comm_;
  std::string path_;
};

// The first n ranks of the world as their own communicator (null on the others). Collective
// over the world.
class SubWorld {
 public:
  explicit SubWorld(int n) {
    const bool member = worldRank() < n;
    MPI_Comm_split(testComm(), member ? 0 : MPI_UNDEFINED, worldRank(), &mpi_);
    if (member) comm_ = std::make_unique<comm::MpiCommunicator>(mpi_);
  }
  ~SubWorld() {
    comm_.reset();
    if (mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }
  SubWorld(const SubWorld&) = delete;
  SubWorld& operator=(const SubWorld&) = delete;
  comm::Communicator* get() { return comm_.get(); }

 private:
  MPI_Comm mpi_ = MPI_COMM_NULL;
  std::unique_ptr<comm::MpiCommunicator> comm_;
};

// Adam with L2 weight decay and clipping in fp32; SGD with momentum in fp16/bf16; a warmup
// schedule (the lr depends on the step counters) and, for fp16, a loss scale that grows every
// 3 clean steps (the scaler's state matters).
inline std::string checkpointConfig(int stage, std::int64_t micro, int accum, int world, DType dtype,
                                    bool sgd = false) {
  std::string precision;
  if (dtype == DType::F16) precision = R"("fp16": {"enabled": true, "initial_scale_power": 8, "loss_scale_window": 3},)";
  if (dtype == DType::BF16) precision = R"("bf16": {"enabled": true},)";
  const std::string optimizer =
      sgd ? R"("optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},)"
          : R"("optimizer": {"type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.01, "adam_w_mode": false}},
             "gradient_clipping": 0.05,)";
  const std::string lr = sgd ? "0.05" : "0.01";
  return detail::cat(R"({"train_batch_size": )", micro * accum * world,
                     R"(, "train_micro_batch_size_per_gpu": )", micro,
                     R"(, "gradient_accumulation_steps": )", accum, ",", optimizer, precision,
                     R"("scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": )", lr,
                     R"(, "warmup_num_steps": 4}},)",
                     R"("zero_optimization": {"stage": )", stage,
                     R"(, "reduce_bucket_size": 40, "allgather_bucket_size": 100, "overlap_comm": true)",
                     R"(, "stage3_param_persistence_threshold": 10, "stage3_max_live_parameters": 160)",
                     R"(, "stage3_prefetch_bucket_size": 80, "stage3_max_reuse_distance": 0}})");
}

// An engine with its own device, for tests that make several.
struct TestEngine {
  TestEngine(comm::Communicator& comm, int stage, std::int64_t micro, int accum, DType dtype,
             EngineModel model = testModel(0.02), bool sgd = false)
      : config(parseConfig(checkpointConfig(stage, micro, accum, comm.size(), dtype, sgd), "checkpoint test",
                           comm.size())),
        device(makeDevice("host:64M", ledger)),
        engine(config, *device, comm, std::move(model)) {}
  Config config;
  MemoryLedger ledger;
  std::unique_ptr<Device> device;
  Engine engine;
};

inline bool sameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Every state of two checkpoints, consolidated, compared byte for byte; "" when equal, else the
// first state that differs.
inline std::string compareStates(const std::string& a, const std::string& b) {
  const checkpoint::CheckpointReader ra(a), rb(b);
  for (const checkpoint::ManifestState& s : ra.manifest().states) {
    const checkpoint::ManifestState* t = rb.manifest().state(s.name);
    if (!t) return "state " + s.name + " missing from " + b;
    if (t->numel != s.numel || t->dtype != s.dtype) return "state " + s.name + " differs in size or dtype";
    std::vector<char> x(s.numel * dtypeSize(s.dtype)), y(x.size());
    ra.read(s.name, 0, s.numel, s.dtype, x.data());
    rb.read(s.name, 0, s.numel, s.dtype, y.data());
    if (x != y) return "state " + s.name + " differs";
  }
  if (ra.manifest().states.size() != rb.manifest().states.size()) return "different state counts";
  const auto ea = ra.engineState(), eb = rb.engineState();
  if (ea.at("optimizer_steps_attempted") != eb.at("optimizer_steps_attempted") ||
      ea.at("optimizer_steps_taken") != eb.at("optimizer_steps_taken") || ea.at("loss_scaler") != eb.at("loss_scaler"))
    return "engine state differs: " + ea.dump() + " vs " + eb.dump();
  return {};
}

}  // namespace zrt::test
