// offload_optimizer: the fp32 master weights and moments in host memory (cpu) or in swap files
// on NVMe (nvme, stepped sub-group by sub-group through pinned buffers), the gradient shard in
// pinned host memory. The arithmetic is the same as without offload, so every run must end on
// exactly the parameters of the same run without it (bit for bit), at every stage offload
// allows, in fp32 and bf16, with accumulation 1 and 3, on the ranks given.
// offload_param (stage 3): the parameter shard in host memory (cpu) or in swap files (nvme; its
// first max_in_cpu elements in host memory), read into pinned staging buffers before each gather.
// Also: the ledger shows each state on its tier, once; swap files are gone after the engine;
// a device too small for stage 3 without offload trains with parameters and optimizer on NVMe.
// The model is synthetic and says so: a deterministic gradient g = sin(θ + 0.1·(rank + micro))
// per element, so the trajectory depends on every parameter, rank and micro-step.
#include <doctest/doctest.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "comm/string_gather.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

constexpr int kSteps = 6;

EngineModel syntheticModel() {
  EngineModel m;
  for (int i = 0; i < 4; ++i) {
    ModuleSpec mod{"block" + std::to_string(i), {}};
    mod.params.push_back({"weight", {50, 60}, init::normal(7 + static_cast<std::uint64_t>(i), 0.5)});
    mod.params.push_back({"bias", {60}, init::normal(70 + static_cast<std::uint64_t>(i), 0.1)});
    m.modules.push_back(std::move(mod));
  }
  return m;
}

// A scratch directory for swap files, removed with everything in it.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "zrt-offload-test-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

// The zero_optimization keys that put the optimizer state in swap files under `dir`.
std::string nvmeOffload(const std::filesystem::path& dir, int bufferCount = 4) {
  return detail::cat(R"(, "offload_optimizer": {"device": "nvme", "nvme_path": [")", dir.string(),
                     R"("], "buffer_count": )", bufferCount, "}");
}

// The keys that put the parameter shard in swap files under `dir`, its first `maxInCpu` elements
// in host memory. Persistence off, so every module goes through the fetch path (and its reads).
std::string paramNvme(const std::filesystem::path& dir, std::int64_t maxInCpu, int bufferCount = 2) {
  return detail::cat(R"(, "stage3_param_persistence_threshold": 0, "offload_param": {"device": "nvme", "nvme_path": [")",
                     dir.string(), R"("], "buffer_count": )", bufferCount, R"(, "max_in_cpu": )", maxInCpu, "}");
}

std::string config(int stage, int world, int accum, DType dtype, const std::string& offload) {
  std::string precision;
  if (dtype == DType::BF16) precision = R"("bf16": {"enabled": true},)";
  return detail::cat(R"({"train_batch_size": )", accum * world, R"(, "gradient_accumulation_steps": )", accum,
                     R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},)",
                     R"("gradient_clipping": 1.0,)", precision, R"("zero_optimization": {"stage": )", stage,
                     R"(, "reduce_bucket_size": 2000, "sub_group_size": 1024)", offload, "}}");
}

std::vector<std::vector<float>> train(Engine& engine, comm::Communicator& comm, int steps = kSteps) {
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < engine.accumulationSteps(); ++m) {
      engine.beginMicroStep();
      for (std::size_t mod = engine.numModules(); mod-- > 0;) {
        const auto p = engine.parameters(mod);
        const auto g = engine.gradients(mod);
        for (std::size_t t = 0; t < p.size(); ++t)
          for (std::size_t i = 0; i < p[t].numel; ++i)
            test::storeValue(g[t].dtype, g[t].data, i,
                             static_cast<float>(engine.gradientSeed() *
                                                std::sin(test::loadValue(p[t].dtype, p[t].data, i) +
                                                         0.1 * (comm.rank() + m))));
        engine.backwardDone(mod);
        engine.release(mod);
      }
      engine.endMicroStep();
    }
    const StepReport r = engine.step();  // outside CHECK: a failure must reach the caller
    CHECK(r.taken);
  }
  std::vector<std::vector<float>> values;
  for (std::size_t mod = 0; mod < engine.numModules(); ++mod)
    for (std::size_t p = 0; p < 2; ++p) values.push_back(engine.parameterValues(mod, p));
  return values;
}

}  // namespace

namespace {

// Every offload the stage allows, in `dtype`, with accumulation 1 and 3, against the same run
// without offload. A test case per dtype, so that the sanitizer build can run each in a shard of
// its own (SANITIZE_SHARDS, tests/runtime/CMakeLists.txt): the whole matrix in one case took
// most of the program's 48-56 s there.
void offloadMatchesPlain(DType dtype) {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  const std::string nvme = nvmeOffload(scratch.path, 3);
  int compared = 0;
  for (int accum : {1, 3}) {
    for (int stage : {1, 2, 3}) {
      MemoryLedger plainLedger;
      auto plainDevice = makeDevice("host:64M", plainLedger);
      Engine plain(parseConfig(config(stage, world, accum, dtype, ""), "plain", world), *plainDevice, comm,
                   syntheticModel());
      const auto want = train(plain, comm);
      std::vector<std::string> offloads = {R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})",
                                           R"(, "offload_optimizer": {"device": "cpu"})"};
      if (stage == 3) {  // DeepSpeed's rule: NVMe and parameter offload from stage 3
        offloads.push_back(nvme);
        offloads.push_back(R"(, "offload_param": {"device": "cpu", "pin_memory": true})");
        offloads.push_back(R"(, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"})");
        // Parameters on NVMe: all of them, with the optimizer there too; split at 2048
        // elements (a 4 KiB boundary in either dtype), so modules straddle memory and file;
        // DeepSpeed's default max_in_cpu, which keeps this small shard in memory.
        offloads.push_back(paramNvme(scratch.path, 0) + nvme);
        offloads.push_back(paramNvme(scratch.path, 2048) + nvme);
        offloads.push_back(paramNvme(scratch.path, 2048, 3) + R"(, "offload_optimizer": {"device": "cpu"})");
        offloads.push_back(paramNvme(scratch.path, 1'000'000'000) + R"(, "offload_optimizer": {"device": "cpu"})");
      }
      for (const std::string& offload : offloads) {
        CAPTURE(nameOf(dtype));
        CAPTURE(accum);
        CAPTURE(stage);
        CAPTURE(offload);
        MemoryLedger ledger;
        auto device = makeDevice("host:64M", ledger);
        Engine engine(parseConfig(config(stage, world, accum, dtype, offload), "offload", world), *device,
                      comm, syntheticModel());
        const bool onNvme = offload.find(R"("offload_optimizer": {"device": "nvme")") != std::string::npos;
        const bool paramOffload = offload.find("offload_param") != std::string::npos;
        const bool paramsOnNvme = offload.find(R"("max_in_cpu": 1000000000)") == std::string::npos &&
                                  offload.find(R"("offload_param": {"device": "nvme")") != std::string::npos;
        // fp32 with the optimizer on NVMe too: the parameter shard is read from the master
        // weights' file, which holds the same values, and has no file of its own.
        const bool paramsInFiles = paramsOnNvme && !(dtype == DType::F32 && onNvme);
        const bool optimOffload = offload.find("offload_optimizer") != std::string::npos;
        // What was offloaded left the device: the parameter shard (the gathered copies stay),
        // the optimizer state and the gradient shard.
        CHECK((ledger.get(MemTag::Parameters, MemPlace::Device).current == 0) == paramOffload);
        CHECK((ledger.get(MemTag::OptimizerState, MemPlace::Device).current == 0) == optimOffload);
        CHECK((ledger.get(MemTag::Gradients, MemPlace::PinnedHost).current > 0) == optimOffload);
        CHECK((ledger.get(MemTag::OptimizerState, MemPlace::Nvme).current > 0) == onNvme);
        CHECK((ledger.get(MemTag::SwapBuffers, MemPlace::PinnedHost).current > 0) == (onNvme || paramsOnNvme));
        CHECK((ledger.get(MemTag::Parameters, MemPlace::Nvme).current > 0) == paramsInFiles);
        CHECK(train(engine, comm) == want);
        ++compared;
      }
    }
  }
  CHECK(compared == 2 * 13);
  // Every swap file went with its engine.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(scratch.path))
    FAIL("left behind: " << entry.path());
}

}  // namespace

TEST_CASE("offloaded optimizer runs end on the parameters of the run without offload, bit for bit: fp32") {
  offloadMatchesPlain(DType::F32);
}

TEST_CASE("offloaded optimizer runs end on the parameters of the run without offload, bit for bit: bf16") {
  offloadMatchesPlain(DType::BF16);
}

TEST_CASE("NVMe state is charged once, at its size, and its swap files are in the job's directory") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const std::string nvme = nvmeOffload(scratch.path);
  Engine engine(parseConfig(config(3, world, 1, DType::BF16, nvme), "nvme", world), *device, comm, syntheticModel());
  // Ψ = 4·(50·60 + 60) = 12240, padded to a multiple of 32·N: master, m and v of the shard.
  const std::uint64_t shard = (12240 + 32 * world - 1) / (32 * world) * 32;
  CHECK(ledger.get(MemTag::OptimizerState, MemPlace::Nvme).current >= 3 * 4 * shard);
  CHECK(ledger.get(MemTag::OptimizerState, MemPlace::Nvme).current < 3 * 4 * shard + 3 * 8192);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(scratch.path))
    files += entry.is_regular_file();
  CHECK(files == 3);
}

TEST_CASE("a device too small for stage 3 trains with parameters and optimizer on NVMe") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  const std::string nvme = nvmeOffload(scratch.path) + paramNvme(scratch.path, 0);
  std::uint64_t offloadedPeak = 0;
  {
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    Engine engine(parseConfig(config(3, world, 1, DType::BF16, nvme), "nvme", world), *device, comm, syntheticModel());
    train(engine, comm);
    offloadedPeak = ledger.total(MemPlace::Device).peak;
  }
  MemoryLedger ledger;
  auto device = makeDevice("host:" + std::to_string(offloadedPeak), ledger);
  std::string msg;
  try {
    Engine e(parseConfig(config(3, world, 1, DType::BF16, ""), "stage3.json", world), *device, comm, syntheticModel());
  } catch (const OutOfMemory& ex) {  // the failing rank's class, on every rank
    msg = ex.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("memory ledger") != std::string::npos);
  Engine engine(parseConfig(config(3, world, 1, DType::BF16, nvme), "nvme.json", world), *device, comm, syntheticModel());
  train(engine, comm);
  CHECK(ledger.total(MemPlace::Device).peak <= offloadedPeak);
}

TEST_CASE("an I/O error during the NVMe optimizer step names the file on every rank; parameters keep") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const std::string nvme = nvmeOffload(scratch.path, 2);
  // Rank 0's engine fails its 5th transfer after the initial writes: a read of the first step.
  // (Initialisation writes every sub-group of each state once: sub-groups x 3 transfers.)
  const std::uint64_t shard = (12240 + 32 * world - 1) / (32 * world) * 32;
  const std::uint64_t initWrites = 3 * ((shard + 1023) / 1024);
  if (comm.rank() == 0) setenv("ZRT_AIO_FAULT", std::to_string(initWrites + 4).c_str(), 1);
  Engine engine(parseConfig(config(3, world, 1, DType::BF16, nvme), "nvme", world), *device, comm, syntheticModel());
  unsetenv("ZRT_AIO_FAULT");
  std::vector<std::vector<float>> before;
  for (std::size_t mod = 0; mod < engine.numModules(); ++mod)
    for (std::size_t p = 0; p < 2; ++p) before.push_back(engine.parameterValues(mod, p));
  std::string msg;
  try {
    train(engine, comm);
  } catch (const IoError& e) {  // the failing rank's class, on every rank
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("the optimizer step failed") != std::string::npos);
  CHECK(msg.find("rank 0: ") != std::string::npos);
  CHECK(msg.find("zrt-offload-test-") != std::string::npos);  // the file (rank 0's scratch)
  CHECK(msg.find("offset") != std::string::npos);
  std::vector<std::vector<float>> after;
  for (std::size_t mod = 0; mod < engine.numModules(); ++mod)
    for (std::size_t p = 0; p < 2; ++p) after.push_back(engine.parameterValues(mod, p));
  CHECK(after == before);
}

TEST_CASE("parameters on NVMe: charged once per tier, read ahead along the trace, files removed") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  // Ψ = 12240 bf16 elements padded to 32·N; the first 2048 of the shard stay in host memory.
  const std::uint64_t shard = (12240 + 32 * world - 1) / (32 * world) * 32;
  const std::uint64_t inCpu = std::min<std::uint64_t>(2048, shard);
  {
    MemoryLedger ledger;
    auto device = makeDevice("host:64M", ledger);
    // A prefetch bucket of one module: the reads reach further ahead than the gathers.
    const std::string keys = paramNvme(scratch.path, 2048, 4) +
                             R"(, "stage3_prefetch_bucket_size": 3060, "offload_optimizer": {"device": "cpu"})";
    Engine engine(parseConfig(config(3, world, 1, DType::BF16, keys), "param-nvme", world), *device, comm,
                  syntheticModel());
    CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == 0);
    CHECK(ledger.get(MemTag::Parameters, MemPlace::Host).current == 2 * inCpu);
    CHECK(ledger.get(MemTag::Parameters, MemPlace::Nvme).current >= 2 * (shard - inCpu));
    CHECK(ledger.get(MemTag::Parameters, MemPlace::Nvme).current < 2 * (shard - inCpu) + 8192);
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(scratch.path))
      files += entry.is_regular_file();
    CHECK(files == (shard > inCpu ? 1u : 0u));
    // The first step records the trace; later ones start reads ahead of their gathers.
    StepReport last;
    for (int s = 0; s < 3; ++s) {
      engine.beginMicroStep();
      for (std::size_t mod = engine.numModules(); mod-- > 0;) {
        const auto p = engine.parameters(mod);
        const auto g = engine.gradients(mod);
        for (std::size_t t = 0; t < p.size(); ++t)
          for (std::size_t i = 0; i < p[t].numel; ++i) test::storeValue(g[t].dtype, g[t].data, i, 0.01f);
        engine.backwardDone(mod);
        engine.release(mod);
      }
      engine.endMicroStep();
      last = engine.step();
    }
    if (shard > inCpu) CHECK(last.paramReadsAhead > 0);
    CHECK(last.gathersOnDemand == 0);
  }
  for (const auto& entry : std::filesystem::recursive_directory_iterator(scratch.path))
    FAIL("left behind: " << entry.path());
}

TEST_CASE("offload_param nvme without an offloaded optimizer or a path is refused by name") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  auto attempt = [&](const std::string& keys) {
    try {
      Engine e(parseConfig(config(3, world, 1, DType::BF16, keys), "p.json", world), *device, comm, syntheticModel());
    } catch (const std::exception& ex) {
      return std::string(ex.what());
    }
    return std::string();
  };
  CHECK(attempt(paramNvme(scratch.path, 0)).find("offload_param.device nvme needs offload_optimizer") !=
        std::string::npos);
  const std::string noPath = attempt(R"(, "offload_param": {"device": "nvme"}, "offload_optimizer": {"device": "cpu"})");
  CAPTURE(noPath);
  CHECK(noPath.find("nvme_path") != std::string::npos);
}

TEST_CASE("an I/O error reading parameters from NVMe fails the micro-step on every rank, naming the file") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  const std::string keys = paramNvme(scratch.path, 0) + R"(, "offload_optimizer": {"device": "cpu"})";
  // The values the failing engine starts from, read from a twin (the failing engine must not
  // read before its fault).
  std::vector<std::vector<float>> before;
  {
    Engine twin(parseConfig(config(3, world, 1, DType::BF16, keys), "twin", world), *device, comm, syntheticModel());
    for (std::size_t mod = 0; mod < twin.numModules(); ++mod)
      for (std::size_t p = 0; p < 2; ++p) before.push_back(twin.parameterValues(mod, p));
  }
  // Rank 0's engine fails its first read: one of the first micro-step's fetches.
  if (comm.rank() == 0) setenv("ZRT_AIO_FAULT", "read:0", 1);
  std::unique_ptr<Engine> failing;
  try {
    failing = std::make_unique<Engine>(parseConfig(config(3, world, 1, DType::BF16, keys), "param-nvme", world),
                                       *device, comm, syntheticModel());
  } catch (...) {
    unsetenv("ZRT_AIO_FAULT");  // never into the next test
    throw;
  }
  unsetenv("ZRT_AIO_FAULT");
  Engine& engine = *failing;
  std::string msg;
  try {
    train(engine, comm, 1);
  } catch (const IoError& e) {  // the failing rank's class, on every rank
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("reading parameters failed") != std::string::npos);
  CHECK(msg.find("rank 0: ") != std::string::npos);
  CHECK(msg.find("zrt-offload-test-") != std::string::npos);  // the file (rank 0's scratch)
  CHECK(msg.find("offset") != std::string::npos);
  std::vector<std::vector<float>> after;
  for (std::size_t mod = 0; mod < engine.numModules(); ++mod)
    for (std::size_t p = 0; p < 2; ++p) after.push_back(engine.parameterValues(mod, p));
  CHECK(after == before);
}

TEST_CASE("a checkpoint of offloaded state resumes exactly, with or without offload") {
  const int world = test::worldSize();
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  ScratchDir scratch;  // this rank's; the checkpoints go in rank 0's, shared by path below
  std::string dir = scratch.path.string() + "/ckpt";
  dir = comm::allGatherStrings(comm, comm.rank() == 0 ? dir : std::string())[0];
  const std::string nvme = nvmeOffload(scratch.path, 2);
  const std::string cpu = R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})";
  const std::string both = nvme + paramNvme(scratch.path, 0);
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  // fp32 too: with both on NVMe the parameter shard is read from the master weights' file, and
  // the checkpoint must still hold (and restore) both.
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (const std::string& saved : {nvme, cpu, both}) {
      CAPTURE(nameOf(dtype));
      CAPTURE(saved);
      const std::string tag = std::string(nameOf(dtype)) + (saved == nvme ? "-nvme" : saved == cpu ? "-cpu" : "-both");
      std::vector<std::vector<float>> straight;
      {
        Engine engine(parseConfig(config(3, world, 1, dtype, saved), "saving", world), *device, comm,
                      syntheticModel());
        train(engine, comm, 3);
        engine.save(dir, tag);  // NVMe: master and moments copied file to file from the swap files
        straight = train(engine, comm, 3);
      }
      for (const std::string& offload : {nvme, cpu, both, std::string()}) {
        CAPTURE(offload);
        Engine engine(parseConfig(config(3, world, 1, dtype, offload), "resumed", world), *device, comm,
                      syntheticModel());
        engine.load(dir, tag);
        CHECK(train(engine, comm, 3) == straight);
      }
    }
  }
}
