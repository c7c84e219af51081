// The Engine on the strict host device (device memory the host cannot touch, every stream task
// delayed by ZRT_STRICT_STREAM_DELAY_US) ends bit-identical to the same run on `host`: stages 0,
// 1, 2 and 3, fp32, fp16 and bf16, with and without gradient accumulation, Adam, AdamW and SGD
// (momentum, Nesterov) on the device, with gradient clipping that bites and, in fp16, an
// overflowing step that is skipped; at stages 1 and 2 with offload_optimizer cpu (gradients down
// to pinned memory, the CPU's optimizer there, Adam or SGD, the update copied back up); at stage
// 3 with every module gathered, released and gathered again through the staged lane, and with
// the optimizer (cpu, nvme) and the parameters (cpu, nvme) offloaded. Checkpoints saved on either
// device resume on the other, and reshard to one rank, bit for bit. The model reads its
// parameters and writes its gradients only through the device's copies (TrainHooks::device), so
// a host access anywhere in the step would kill the run with the tag and offset. A backend that
// takes device memory only (NCCL's contract, tests/support/device_only_comm.h) is refused by name
// as the Engine's communicator and, as its data communicator beside MPI, carries the buckets and
// gathers of every stage and offload to the same bits (its own ctest entry,
// runtime_engine_data_comm_test_np2).
// Registered again under the cuda label (runtime_engine_cuda_test_np2/np4, ZRT_TEST_DEVICE=cuda:0):
// the same matrix on a GPU against host, skipped where no CUDA device answers.
#include <doctest/doctest.h>
#include <mpi.h>

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/build_config.h"
#if ZRT_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#include "core/cuda/cuda_device.h"
#endif
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "core/strict_device.h"
#include "runtime/engine.h"
#include "tests/runtime/checkpoint_test_support.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/device_only_comm.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

constexpr int kSteps = 4;
constexpr std::int64_t kMicro = 2;

// zeroExtra: more keys of zero_optimization, each after a comma.
std::string configText(int stage, int accum, int world, DType dtype, bool adamW,
                       const std::string& zeroExtra = "") {
  std::string precision;
  if (dtype == DType::F16) precision = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
  if (dtype == DType::BF16) precision = R"("bf16": {"enabled": true},)";
  return detail::cat(
      R"({"train_batch_size": )", kMicro * accum * world, R"(, "train_micro_batch_size_per_gpu": )",
      kMicro, R"(, "gradient_accumulation_steps": )", accum,
      R"(, "optimizer": {"type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.01, "adam_w_mode": )",
      adamW ? "true" : "false", R"(}}, "gradient_clipping": 0.05,)", precision,
      R"("zero_optimization": {"stage": )", stage,
      R"(, "reduce_bucket_size": 40, "allgather_bucket_size": 100, "overlap_comm": true)",
      zeroExtra, "}}");
}

struct Run {
  std::vector<std::vector<float>> values;
  std::vector<StepReport> reports;
};

// The optimizer's entry replaced by `optimizer` (when not empty).
std::string withOptimizer(std::string text, const std::string& optimizer) {
  if (optimizer.empty()) return text;
  const std::size_t at = text.find(R"("optimizer")");
  const std::size_t end = text.find("}},", at) + 3;
  return text.replace(at, end - at, optimizer);
}

const std::string kOffloadCpu = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
const std::string kSgd =
    R"("optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},)";

// NCCL itself as the data communicator (ZRT_TEST_NCCL=1, with ZRT_TEST_DEVICE=cuda:0), where the
// build has it.
bool ncclUnderTest() {
  const char* n = std::getenv("ZRT_TEST_NCCL");
  return ZRT_HAVE_NCCL && n && std::string(n) == "1";
}

// deviceBackend: the model's data goes through a backend that takes device memory only beside
// `comm`: test::DeviceOnlyComm (NCCL's contract), or NCCL itself under ZRT_TEST_NCCL=1 on a GPU
// (runtime_engine_nccl_test_np1). The run checks that it carried some.
Run trainOn(const std::string& spec, comm::Communicator& comm, int stage, int accum, DType dtype,
            bool adamW, const std::string& zeroExtra = "", const std::string& optimizer = "",
            bool deviceBackend = false) {
  const Config config = parseConfig(
      withOptimizer(configText(stage, accum, comm.size(), dtype, adamW, zeroExtra), optimizer),
      "strict test", comm.size());
  MemoryLedger ledger;
  auto device = makeDevice(spec, ledger);
  std::unique_ptr<comm::Communicator> lane;
  std::unique_ptr<Stream> ncclStream;  // outlives the NCCL communicator that orders after it
  std::unique_ptr<comm::Communicator> data;
  if (deviceBackend && ncclUnderTest()) {
#if ZRT_HAVE_NCCL
    ncclStream = device->createStream();
    data = std::make_unique<comm::NcclCommunicator>(dynamic_cast<CudaDevice&>(*device), *ncclStream,
                                                    MPI_COMM_WORLD);
#endif
  } else if (deviceBackend) {
    lane = comm.duplicate();
    data = std::make_unique<test::DeviceOnlyComm>(*device, *lane);
  }
  auto built = data ? std::make_unique<Engine>(config, *device, comm, *data, test::testModel(0.02))
                    : std::make_unique<Engine>(config, *device, comm, test::testModel(0.02));
  Engine& engine = *built;
  test::TrainHooks hooks;
  if (!device->hostReadsDeviceMemory()) hooks.device = device.get();
  // fp16: an inf in rank 0's gradient in step 1's last micro-step overflows that step on every
  // rank; it is skipped and the scale halves, on both devices alike.
  if (dtype == DType::F16)
    hooks.beforeDone = [&](int s, int m, int l, TensorRef& w) {
      if (s == 1 && m == accum - 1 && l == 1 && comm.rank() == 0)
        test::storeValue(w.dtype, w.data, 3, std::numeric_limits<float>::infinity());
    };
  Run r;
  r.reports = test::train(engine, comm, kSteps, kMicro, hooks);
  r.values = test::trainedValues(engine);
  if (data) CHECK(data->stats().get(comm::OpKind::ReduceScatter).calls + data->stats().get(comm::OpKind::AllReduce).calls > 0);
  return r;
}

bool sameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// The device's run equals host's: the values, and each step's report (taken or skipped, the
// gradient norm's bits, the loss scale).
void checkSameRun(const Run& host, const Run& device) {
  CHECK(sameBits(host.values, device.values));
  REQUIRE(host.reports.size() == device.reports.size());
  for (std::size_t s = 0; s < host.reports.size(); ++s) {
    CAPTURE(s);
    CHECK(host.reports[s].taken == device.reports[s].taken);
    CHECK(std::memcmp(&host.reports[s].gradNorm, &device.reports[s].gradNorm, sizeof(double)) == 0);
    CHECK(host.reports[s].lossScale == device.reports[s].lossScale);
  }
}

// The device under test: host-strict, or a GPU where the program is registered under the cuda
// label (ZRT_TEST_DEVICE=cuda:0; its main skips the program where no CUDA device answers).
std::string deviceUnderTest() {
  const char* d = std::getenv("ZRT_TEST_DEVICE");
  return d && *d ? d : "host-strict:64M";
}

// Persistence off and a small pool of live parameters: every module is gathered, released,
// prefetched and gathered again for its backward through the coordinator.
const std::string kStage3 =
    R"(, "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 160)";

// A scratch directory of this rank's for swap files (removed by the caller).
std::string rankScratch(int rank) {
  std::string t = detail::cat(std::filesystem::temp_directory_path().string(), "/zrt-strict-test-rank", rank,
                              "-XXXXXX");
  REQUIRE(::mkdtemp(t.data()) != nullptr);
  return t;
}

std::string optimizerNvme(const std::string& dir) {
  return detail::cat(R"(, "offload_optimizer": {"device": "nvme", "nvme_path": [")", dir,
                     R"("], "buffer_count": 2})");
}

std::string parametersNvme(const std::string& dir) {
  return detail::cat(R"(, "offload_param": {"device": "nvme", "nvme_path": [")", dir,
                     R"("], "buffer_count": 2, "max_in_cpu": 0})");
}

// Trains steps [first, first + steps) of an engine built by the caller.
std::vector<std::vector<float>> trainSteps(Engine& engine, Device& device, comm::Communicator& comm,
                                           int first, int steps) {
  test::TrainHooks hooks;
  hooks.firstStep = first;
  if (!device.hostReadsDeviceMemory()) hooks.device = &device;
  test::train(engine, comm, steps, kMicro, hooks);
  return test::trainedValues(engine);
}

}  // namespace

TEST_CASE("stages 0-2 on host-strict with delayed streams end bit-identical to host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  int compared = 0;
  for (int stage : {0, 1, 2})
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (int accum : {1, 2}) {
        const bool adamW = accum == 2;
        CAPTURE(stage);
        CAPTURE(nameOf(dtype));
        CAPTURE(accum);
        const Run host = trainOn("host:64M", comm, stage, accum, dtype, adamW);
        const Run strict = trainOn(deviceUnderTest(), comm, stage, accum, dtype, adamW);
        checkSameRun(host, strict);
        // The run did something: clipping bites (the norm is over 0.05), fp16 skipped step 1.
        CHECK(host.reports[0].gradNorm > 0.05);
        CHECK(host.reports[1].taken == (dtype != DType::F16));
        ++compared;
      }
  CHECK(compared == 18);
}

TEST_CASE("offload_optimizer cpu at stages 1 and 2 on host-strict ends bit-identical to host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  int compared = 0;
  for (int stage : {1, 2})
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (int accum : {1, 2})
        for (bool sgd : {false, true}) {
          if (sgd && accum == 1) continue;  // SGD (momentum) on the CPU once per stage and dtype
          CAPTURE(stage);
          CAPTURE(nameOf(dtype));
          CAPTURE(accum);
          CAPTURE(sgd);
          const std::string opt = sgd ? kSgd : "";
          const Run host = trainOn("host:64M", comm, stage, accum, dtype, true, kOffloadCpu, opt);
          const Run strict =
              trainOn(deviceUnderTest(), comm, stage, accum, dtype, true, kOffloadCpu, opt);
          checkSameRun(host, strict);
          CHECK(host.reports[1].taken == (dtype != DType::F16));
          ++compared;
        }
  CHECK(compared == 18);
}

TEST_CASE("stage 3 on host-strict, with every offload, ends bit-identical to host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const std::string dir = rankScratch(comm.rank());
  const std::string s3 = kStage3;
  const std::string optNvme = optimizerNvme(dir);
  const std::string paramCpu = R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
  const std::string paramNvme = parametersNvme(dir);
  struct Variant {
    const char* name;
    std::string zero;
  };
  const Variant variants[] = {{"on the device", s3},
                              {"offload_optimizer cpu", s3 + kOffloadCpu},
                              {"offload_optimizer nvme", s3 + optNvme},
                              {"offload_param cpu, optimizer cpu", s3 + paramCpu + kOffloadCpu},
                              {"offload_param nvme, optimizer nvme", s3 + paramNvme + optNvme}};
  int compared = 0;
  for (const Variant& v : variants)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (int accum : {1, 2}) {
        // The offloaded variants once per dtype, accumulating; all of them on the device.
        if (v.zero != s3 && accum == 1) continue;
        CAPTURE(v.name);
        CAPTURE(nameOf(dtype));
        CAPTURE(accum);
        const Run host = trainOn("host:64M", comm, 3, accum, dtype, true, v.zero);
        const Run strict = trainOn(deviceUnderTest(), comm, 3, accum, dtype, true, v.zero);
        checkSameRun(host, strict);
        CHECK(host.reports[1].taken == (dtype != DType::F16));
        ++compared;
      }
  CHECK(compared == 18);
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoints on host-strict: save, load and reshard end bit-identical to host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const int world = comm.size();
  const std::string scratch = rankScratch(comm.rank());
  struct Setup {
    int stage;
    DType dtype;
    int accum;
    std::string zero;
  };
  const Setup setups[] = {{0, DType::F32, 1, ""},
                          {1, DType::BF16, 2, ""},
                          {2, DType::F16, 1, kOffloadCpu},
                          {3, DType::BF16, 2, kStage3},
                          {3, DType::F32, 1, kStage3 + parametersNvme(scratch) + optimizerNvme(scratch)}};
  int compared = 0;
  for (const Setup& u : setups) {
    CAPTURE(u.stage);
    CAPTURE(nameOf(u.dtype));
    CAPTURE(u.zero);
    const test::SharedTempDir ckpt;
    auto config = [&](int ranks) {
      return parseConfig(configText(u.stage, u.accum, ranks, u.dtype, true, u.zero), "ckpt", ranks);
    };
    MemoryLedger hostLedger, strictLedger;
    auto host = makeDevice("host:64M", hostLedger);
    auto strict = makeDevice(deviceUnderTest(), strictLedger);
    // The reference: 2 steps on host, saved, 2 more.
    std::vector<std::vector<float>> atSave, atEnd;
    {
      Engine e(config(world), *host, comm, test::testModel(0.02));
      atSave = trainSteps(e, *host, comm, 0, 2);
      e.save(ckpt.path(), "host");
      atEnd = trainSteps(e, *host, comm, 2, 2);
    }
    {  // The same on host-strict, saved.
      Engine e(config(world), *strict, comm, test::testModel(0.02));
      CHECK(sameBits(trainSteps(e, *strict, comm, 0, 2), atSave));
      e.save(ckpt.path(), "strict");
    }
    {  // host-strict resumes host's checkpoint...
      Engine e(config(world), *strict, comm, test::testModel(0.02));
      e.load(ckpt.path(), "host");
      CHECK(sameBits(trainSteps(e, *strict, comm, 2, 2), atEnd));
    }
    {  // ...and host resumes host-strict's.
      Engine e(config(world), *host, comm, test::testModel(0.02));
      e.load(ckpt.path(), "strict");
      CHECK(sameBits(trainSteps(e, *host, comm, 2, 2), atEnd));
    }
    // Resharded: one rank on host-strict loads the 2 ranks' checkpoint and holds their values.
    test::SubWorld one(1);
    if (comm::Communicator* c = one.get()) {
      Engine e(config(1), *strict, *c, test::testModel(0.02));
      e.load(ckpt.path(), "strict");
      CHECK(sameBits(test::trainedValues(e), atSave));
    }
    ++compared;
  }
  CHECK(compared == 5);
  std::filesystem::remove_all(scratch);
}

TEST_CASE("a backend that takes device memory only is refused as the communicator, and so is one over other ranks") {
  comm::MpiCommunicator mpi(MPI_COMM_WORLD);
  MemoryLedger ledger;
  auto device = makeDevice("host-strict:64M", ledger);
  auto lane = mpi.duplicate();
  test::DeviceOnlyComm comm(*device, *lane);
  const std::string text = configText(1, 1, comm.size(), DType::F32, false);
  const std::string msg = test::messageOf(
      [&] { Engine e(parseConfig(text, "s.json", comm.size()), *device, comm, test::testModel()); });
  CAPTURE(msg);
  CHECK(msg.find("engine: the communicator's backend device-only takes device memory only; hand "
                 "the Engine a host backend (MPI) for its agreements and this one as its data "
                 "communicator") != std::string::npos);
  // A data communicator over other ranks than the communicator's is refused before any
  // collective: rank 0 alone tries it (the others have no such communicator).
  test::SubWorld one(1);
  if (comm::Communicator* c = one.get()) {
    const std::string wrong = test::messageOf([&] {
      Engine e(parseConfig(configText(1, 1, mpi.size(), DType::F32, false), "s.json", mpi.size()), *device,
               mpi, *c, test::testModel());
    });
    CAPTURE(wrong);
    CHECK(wrong.find(detail::cat("engine: the data communicator (mpi) is rank 0 of 1 but the communicator (mpi) "
                                 "is rank 0 of ", mpi.size(), "; both must span the same ranks")) !=
          std::string::npos);
  }
}

// NCCL's contract on the strict device: the model's data through a backend that takes device
// memory only (it throws on anything else), the agreements on MPI. Every stage, with the
// optimizer and the parameters offloaded (their host shards go through device staging),
// accumulation, fp16's skipped step and bf16, and checkpoints both ways: bit-identical to host.
TEST_CASE("a data communicator that takes device memory only: every stage and offload, as host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const std::string dir = rankScratch(comm.rank());
  const std::string s3 = kStage3;
  const std::string paramCpu = R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
  struct Variant {
    const char* name;
    int stage;
    DType dtype;
    int accum;
    std::string zero;
  };
  const Variant variants[] = {
      {"stage 0, fp16", 0, DType::F16, 2, ""},
      {"stage 1, bf16", 1, DType::BF16, 1, ""},
      {"stage 2, fp32", 2, DType::F32, 2, ""},
      {"stage 2, offload_optimizer cpu, fp16", 2, DType::F16, 2, kOffloadCpu},
      {"stage 3, bf16", 3, DType::BF16, 2, s3},
      {"stage 3, offload_param cpu, optimizer cpu, fp32", 3, DType::F32, 2, s3 + paramCpu + kOffloadCpu},
      {"stage 3, offload_param nvme, optimizer nvme, bf16", 3, DType::BF16, 2,
       s3 + parametersNvme(dir) + optimizerNvme(dir)}};
  int compared = 0;
  for (const Variant& v : variants) {
    CAPTURE(v.name);
    const Run host = trainOn("host:64M", comm, v.stage, v.accum, v.dtype, true, v.zero);
    const Run device = trainOn(deviceUnderTest(), comm, v.stage, v.accum, v.dtype, true, v.zero, "", true);
    checkSameRun(host, device);
    CHECK(host.reports[1].taken == (v.dtype != DType::F16));
    ++compared;
  }
  CHECK(compared == 7);

  // A checkpoint of host's resumes through the data communicator (its load gathers the
  // parameters there), and one saved through it resumes on host: the steps after it as host's.
  const test::SharedTempDir ckpt;
  const Config c = parseConfig(configText(3, 2, comm.size(), DType::BF16, true,
                                          s3 + parametersNvme(dir) + optimizerNvme(dir)),
                               "ckpt", comm.size());
  MemoryLedger hostLedger, deviceLedger;
  auto host = makeDevice("host:64M", hostLedger);
  auto device = makeDevice(deviceUnderTest(), deviceLedger);
  std::vector<std::vector<float>> atEnd;
  {
    Engine e(c, *host, comm, test::testModel(0.02));
    trainSteps(e, *host, comm, 0, 2);
    e.save(ckpt.path(), "host");
    atEnd = trainSteps(e, *host, comm, 2, 2);
  }
  auto lane = comm.duplicate();
  test::DeviceOnlyComm data(*device, *lane);
  {
    Engine e(c, *device, comm, data, test::testModel(0.02));
    e.load(ckpt.path(), "host");
    CHECK(sameBits(trainSteps(e, *device, comm, 2, 2), atEnd));
  }
  {
    Engine e(c, *device, comm, data, test::testModel(0.02));
    trainSteps(e, *device, comm, 0, 2);
    e.save(ckpt.path(), "device");
  }
  {
    Engine e(c, *host, comm, test::testModel(0.02));
    e.load(ckpt.path(), "device");
    CHECK(sameBits(trainSteps(e, *host, comm, 2, 2), atEnd));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("SGD on the device, at every stage, ends bit-identical to host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const std::string nesterov =
      R"("optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "nesterov": true, )"
      R"("weight_decay": 0.01}},)";
  int compared = 0;
  for (int stage : {0, 1, 2, 3})
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      CAPTURE(stage);
      CAPTURE(nameOf(dtype));
      const std::string zero = stage == 3 ? kStage3 : "";
      // Momentum's first step (the buffer becomes the gradient) and its updates; Nesterov with
      // weight decay in bf16.
      const std::string opt = dtype == DType::BF16 ? nesterov : kSgd;
      const Run host = trainOn("host:64M", comm, stage, 2, dtype, true, zero, opt);
      const Run device = trainOn(deviceUnderTest(), comm, stage, 2, dtype, true, zero, opt);
      checkSameRun(host, device);
      CHECK(host.reports[1].taken == (dtype != DType::F16));
      ++compared;
    }
  CHECK(compared == 12);
}
