// The model-state allocator (partition/model_states.h) on the host device against zrt-plan's
// prediction, on 1, 2 and 4 ranks: for every stage, offload pairing, precision, optimizer and
// pinning, each rank's ledger must hold exactly the bytes zrt-plan predicts for that rank, per
// tag and place. Both place model states by one rule (partition/placement.h, tested against
// hand-worked figures in tests/partition/placement_test.cpp); this checks what each side does
// with it: the allocator's buffers and ledger charges, zrt-plan's purposes and bytes.
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partition/model_states.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "tests/support/mpi_test.h"
#include "tools/plan/cli.h"
#include "tools/plan/formulas.h"
#include "tools/plan/model_spec.h"

using namespace zrt;
using namespace zrt::plan;

namespace {

constexpr MemTag kModelStateTags[] = {MemTag::Parameters, MemTag::Gradients, MemTag::OptimizerState};
constexpr MemPlace kPlaces[] = {MemPlace::Device, MemPlace::PinnedHost, MemPlace::Host, MemPlace::Nvme};

std::string describe(const ModelStateOptions& o, bool frozen) {
  return detail::cat("stage ", o.stage, " offload_optimizer ", nameOf(o.offloadOptimizer),
                     " offload_param ", nameOf(o.offloadParam), " ", nameOf(o.precision), " ",
                     nameOf(o.optimizer), o.sgdMomentum ? "+momentum" : "", " pin ", o.pinOptimizer,
                     frozen ? " with frozen tensors" : "", " rank ", o.rank, "/", o.worldSize);
}

// Sizes with zero, one, odd and aligned element counts.
std::vector<ParamTensor> smallModel(bool withFrozen) {
  std::vector<ParamTensor> t = {{"embed", 1000, true}, {"w1", 4097, true}, {"w2", 333, true},
                                {"bias", 7, true},     {"empty", 0, true}, {"w3", 64, true}};
  if (withFrozen) {
    t.insert(t.begin() + 1, {"frozen.a", 5000, false});
    t.push_back({"frozen.b", 1, false});
  }
  return t;
}

}  // namespace

TEST_CASE("every stage and offload pairing: the ledger holds exactly the predicted model states") {
  const int world = test::worldSize(), rank = test::worldRank();
  const OffloadDevice offloads[] = {OffloadDevice::None, OffloadDevice::Cpu, OffloadDevice::Nvme};
  struct Opt {
    OptimizerType type;
    bool momentum;
  };
  const Opt optimizers[] = {{OptimizerType::Adam, false}, {OptimizerType::SGD, true}, {OptimizerType::SGD, false}};
  int cases = 0;
  bool allEqual = true;
  for (int stage = 0; stage <= 3; ++stage)
    for (OffloadDevice opt : offloads)
      for (OffloadDevice param : offloads) {
        if (!offloadAllowed(stage, opt, param)) continue;
        for (DType precision : {DType::F16, DType::BF16, DType::F32})
          for (const Opt& o : optimizers)
            for (bool pin : {false, true})
              for (bool frozen : {false, true}) {
                ModelStateOptions mo;
                mo.stage = stage;
                mo.worldSize = world;
                mo.rank = rank;
                mo.precision = precision;
                mo.optimizer = o.type;
                mo.sgdMomentum = o.momentum;
                mo.offloadOptimizer = opt;
                mo.offloadParam = param;
                mo.pinOptimizer = mo.pinParam = pin;
                const auto tensors = smallModel(frozen);

                // The planner is given the very options the allocator is, plus the counts.
                ModelStateInputs in;
                static_cast<ModelStateOptions&>(in) = mo;
                for (const auto& t : tensors) (t.trainable ? in.trainable : in.frozen) += t.numel;
                MemoryLedger ledger("model states");
                try {
                  const PlanLedger predicted = modelStateBytes(in);
                  auto device = makeDevice("host:64M", ledger);
                  ModelStates states(*device, tensors, mo);
                  ++cases;
                  for (MemTag tag : kModelStateTags)
                    for (MemPlace place : kPlaces) {
                      const std::uint64_t measured = ledger.get(tag, place).current;
                      const std::uint64_t expected = predicted.byTag(tag, place);
                      if (measured != expected) {
                        allEqual = false;
                        FAIL_CHECK(describe(mo, frozen) << ": " << nameOf(tag) << " on " << nameOf(place)
                                                        << ": ledger " << measured << " B, zrt-plan "
                                                        << expected << " B");
                      }
                    }
                  // The buffers are real memory: write every byte the rank holds.
                  for (const StateBuffer* b : {&states.parameters(), &states.frozenParameters(),
                                               &states.gradients(), &states.gradientHostShard(),
                                               &states.masterWeights()}) {
                    if (*b && b->place() != MemPlace::Nvme) {
                      CHECK(b->data() != nullptr);
                      if (b->data()) std::memset(b->data(), 0x5a, b->bytes());
                    }
                  }
                } catch (const std::exception& e) {
                  // Caught here so every rank still reaches the agreement below.
                  allEqual = false;
                  FAIL_CHECK(describe(mo, frozen) << ": " << e.what());
                }
                for (MemPlace place : kPlaces) CHECK(ledger.total(place).current == 0);
              }
      }
  CHECK(cases == 14 * 3 * 3 * 2 * 2);  // stage x offload pairings: 1 + 2 + 2 + 9
  CHECK(test::allRanks(allEqual));
}

TEST_CASE("the ranks' shards tile the padded flat buffer") {
  const int world = test::worldSize(), rank = test::worldRank();
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  ModelStateOptions mo;
  mo.stage = 3;
  mo.worldSize = world;
  mo.rank = rank;
  ModelStates states(*device, smallModel(true), mo);
  const FlatLayout& l = states.trainableLayout();
  CHECK(l.numel == 1000 + 4097 + 333 + 7 + 0 + 64);
  CHECK(l.padded % (static_cast<std::uint64_t>(world) * kShardAlignElements) == 0);
  CHECK(l.offsets == std::vector<std::uint64_t>{0, 1000, 5097, 5430, 5437, 5437});
  std::uint64_t mine[2] = {l.shard.begin, l.shard.valid};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(world));
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, test::testComm());
  std::uint64_t valid = 0;
  for (int r = 0; r < world; ++r) {
    CHECK(all[2 * r] == static_cast<std::uint64_t>(r) * l.shard.count);
    valid += all[2 * r + 1];
  }
  CHECK(valid == l.numel);
  CHECK(states.parameters().bytes() == l.shard.count * 2);
}

TEST_CASE("zrt-plan --json's model-state bytes equal the ledger for every strategy it lists") {
  const int world = test::worldSize(), rank = test::worldRank();
  const TransformerShape shape{2, 64, 4, 100};
  const char* variants[][4] = {{"--precision", "fp16", "--optimizer", "adam"},
                               {"--precision", "bf16", "--optimizer", "adamw"},
                               {"--precision", "fp32", "--optimizer", "sgd"}};
  for (bool pin : {false, true})
    for (const auto& v : variants) {
      std::vector<std::string> args = {"--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "100",
                                       "--seq-len", "16", "--world-size", std::to_string(world),
                                       "--lora-rank", "4", "--host-mem", "1G", "--nvme", "1G", "--json",
                                       v[0], v[1], v[2], v[3]};
      if (pin) args.push_back("--pin-memory");
      std::ostringstream out, err;
      REQUIRE(runPlan(args, out, err) == 0);
      const nlohmann::json j = nlohmann::json::parse(out.str());
      REQUIRE(j["strategies"].size() == 40);

      const ModelSpec full = fromTransformerShape(shape);
      const ModelSpec lora = addLora(full, 4, {"q", "k", "v", "o"});
      for (const auto& s : j["strategies"]) {
        auto offload = [](const std::string& d) {
          return d == "cpu" ? OffloadDevice::Cpu : d == "nvme" ? OffloadDevice::Nvme : OffloadDevice::None;
        };
        ModelStateOptions mo;
        mo.stage = s["stage"];
        mo.worldSize = world;
        mo.rank = rank;
        mo.precision = parseDType(v[1]);
        mo.optimizer = std::string(v[3]) == "sgd" ? OptimizerType::SGD
                       : std::string(v[3]) == "adamw" ? OptimizerType::AdamW
                                                      : OptimizerType::Adam;
        mo.offloadOptimizer = offload(s["offload_optimizer"]);
        mo.offloadParam = offload(s["offload_param"]);
        mo.pinOptimizer = mo.pinParam = pin;
        // As the Engine takes them from a config without these keys (modelStateOptions):
        // DeepSpeed's max_in_cpu, and the strategy's accumulation steps.
        mo.maxInCpu = static_cast<std::uint64_t>(ZeroConfig{}.offload_param.max_in_cpu);
        mo.accumulationSteps = s["gradient_accumulation_steps"].get<int>();
        MemoryLedger ledger;
        auto device = makeDevice("host:64M", ledger);
        ModelStates states(*device, (s["lora"].get<bool>() ? lora : full).paramTensors(), mo);
        auto measured = [&](std::initializer_list<MemPlace> places) {
          std::uint64_t n = 0;
          for (MemTag tag : kModelStateTags)
            for (MemPlace p : places) n += ledger.get(tag, p).current;
          return n;
        };
        INFO(s["id"].get<std::string>() << " " << v[1] << " " << v[3] << " pin " << pin << " rank " << rank);
        CHECK(measured({MemPlace::Device}) == s["model_state_device_bytes"].get<std::uint64_t>());
        CHECK(measured({MemPlace::PinnedHost, MemPlace::Host}) == s["model_state_host_bytes"].get<std::uint64_t>());
        CHECK(measured({MemPlace::Nvme}) == s["model_state_nvme_bytes"].get<std::uint64_t>());
        const auto& b = s["breakdown"];
        const std::pair<MemPlace, const char*> places[] = {
            {MemPlace::Device, "device"}, {MemPlace::PinnedHost, "pinned_host"}, {MemPlace::Host, "host"},
            {MemPlace::Nvme, "nvme"}};
        for (auto [place, name] : places) {
          CHECK(ledger.get(MemTag::Parameters, place).current == b[name]["parameters"].get<std::uint64_t>());
          CHECK(ledger.get(MemTag::Gradients, place).current == b[name]["gradients"].get<std::uint64_t>());
          CHECK(ledger.get(MemTag::OptimizerState, place).current ==
                b[name]["master_weights"].get<std::uint64_t>() + b[name]["optimizer_moments"].get<std::uint64_t>());
        }
      }
    }
}

TEST_CASE("bad pairings and ranks are refused") {
  MemoryLedger ledger;
  auto device = makeDevice("host:1M", ledger);
  ModelStateOptions mo;
  mo.offloadOptimizer = OffloadDevice::Cpu;  // stage 0
  CHECK_THROWS_WITH_AS(ModelStates(*device, smallModel(false), mo), doctest::Contains("offload_optimizer"),
                       InvalidArgument);
  mo = {};
  mo.stage = 2;
  mo.offloadParam = OffloadDevice::Nvme;
  CHECK_THROWS_WITH_AS(ModelStates(*device, smallModel(false), mo), doctest::Contains("offload_param"),
                       InvalidArgument);
  mo = {};
  mo.stage = 1;
  mo.offloadOptimizer = OffloadDevice::Nvme;  // NVMe needs stage 3, as DeepSpeed's ZeRO-Infinity
  CHECK_THROWS_WITH_AS(ModelStates(*device, smallModel(false), mo), doctest::Contains("nvme"), InvalidArgument);
  // The allocator and the config reader apply one set of rules, in the same words.
  const auto breach = offloadRuleBreach(mo.stage, mo.offloadOptimizer, mo.offloadParam);
  REQUIRE(breach.has_value());
  CHECK(breach->section == "offload_optimizer");
  CHECK_THROWS_WITH_AS(ModelStates(*device, smallModel(false), mo), doctest::Contains(breach->problem.c_str()),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(parseConfig(R"({"zero_optimization": {"stage": 1, "offload_optimizer":
                                      {"device": "nvme", "nvme_path": "/tmp"}}})",
                                   "t.json", 1),
                       doctest::Contains(breach->problem.c_str()), ConfigError);
  mo = {};
  mo.rank = 1;
  CHECK_THROWS_AS(ModelStates(*device, smallModel(false), mo), InvalidArgument);
  mo = {};
  mo.stage = 4;
  CHECK_THROWS_AS(ModelStates(*device, smallModel(false), mo), InvalidArgument);
  // A device too small reports out of memory with the ledger, and leaks nothing.
  auto tiny = makeDevice("host:1K", ledger);
  CHECK_THROWS_AS(ModelStates(*tiny, smallModel(false), ModelStateOptions{}), OutOfMemory);
  CHECK(ledger.total(MemPlace::Device).current == 0);
}

TEST_CASE("a state buffer moves its memory and its charge, and releases both") {
  MemoryLedger ledger;
  auto device = makeDevice("host:1M", ledger);
  for (MemPlace place : kPlaces) {
    StateBuffer a(*device, 4096, MemTag::Gradients, place);
    CHECK(ledger.get(MemTag::Gradients, place).current == 4096);
    StateBuffer b = std::move(a);
    CHECK_FALSE(a);
    CHECK(b.bytes() == 4096);
    CHECK((place == MemPlace::Nvme) == (b.data() == nullptr));
    StateBuffer c(*device, 100, MemTag::Gradients, place);
    c = std::move(b);  // c's 100 bytes are released, b's 4096 move in
    CHECK(ledger.get(MemTag::Gradients, place).current == 4096);
    c = StateBuffer();
    CHECK(ledger.get(MemTag::Gradients, place).current == 0);
  }
}
