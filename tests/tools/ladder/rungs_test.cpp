// The ladder's rungs, the configs written for them (read back with the Engine's own config
// reader) and zrt-train's command line.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/config/config.h"
#include "core/error.h"
#include "tools/ladder/rungs.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

// A config written to a private file, read with zrt::loadConfig as zrt-train reads it.
Config loadWritten(const nlohmann::json& j, int ranks) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("zrt_ladder_rungs_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << j.dump(2);
  }
  Config c = loadConfig(path, ranks);
  std::filesystem::remove(path);
  return c;
}

bool has(const std::vector<std::string>& args, const std::string& a) {
  return std::find(args.begin(), args.end(), a) != args.end();
}

std::string after(const std::vector<std::string>& args, const std::string& flag) {
  const auto it = std::find(args.begin(), args.end(), flag);
  REQUIRE(it != args.end());
  REQUIRE(it + 1 != args.end());
  return *(it + 1);
}

}  // namespace

TEST_CASE("each rung adds one lever and keeps the global batch") {
  LadderSpec spec;  // micro-batch 4 x 2 accumulation steps on 2 ranks, small micro-batch 1
  const std::vector<Rung> r = ladderRungs(spec);
  REQUIRE(r.size() == 9);
  const char* names[] = {"baseline", "accumulation", "+ checkpointing", "+ ZeRO 1", "+ ZeRO 2",
                         "+ ZeRO 3", "+ CPU offload", "+ NVMe offload", "+ LoRA"};
  const char* ids[] = {"z0", "z0", "z0-ckpt", "z1-ckpt", "z2-ckpt", "z3-ckpt", "z3-cpu+cpu-ckpt",
                       "z3-nvme+nvme-ckpt", "z3-ckpt-lora"};
  for (std::size_t i = 0; i < r.size(); ++i) {
    CAPTURE(i);
    CHECK(r[i].name == names[i]);
    CHECK(r[i].strategy.id() == ids[i]);
    CHECK(r[i].globalBatch(spec.ranks) == 16);  // 4 x 2 x 2
  }
  CHECK(r[0].strategy.microBatch == 4);
  CHECK(r[0].strategy.gradAccum == 2);
  for (std::size_t i = 1; i < r.size(); ++i) {
    CHECK(r[i].strategy.microBatch == 1);
    CHECK(r[i].strategy.gradAccum == 8);
  }
  CHECK(!r[1].strategy.checkpointing);
  for (std::size_t i = 2; i < r.size(); ++i) CHECK(r[i].strategy.checkpointing);
  CHECK(!r[7].strategy.lora);
  CHECK(r[7].strategy.offloadOptimizer == OffloadDevice::Nvme);
  CHECK(r[7].strategy.offloadParam == OffloadDevice::Nvme);
  CHECK(r[8].strategy.lora);
  CHECK(r[8].strategy.offloadOptimizer == OffloadDevice::None);
  CHECK(r[8].strategy.offloadParam == OffloadDevice::None);
}

TEST_CASE("a small micro-batch of 2 from 6 triples the accumulation") {
  LadderSpec spec;
  spec.microBatch = 6;
  spec.gradAccum = 1;
  spec.smallMicroBatch = 2;
  spec.ranks = 3;
  const std::vector<Rung> r = ladderRungs(spec);
  CHECK(r[1].strategy.microBatch == 2);
  CHECK(r[1].strategy.gradAccum == 3);
  CHECK(r[1].globalBatch(3) == 18);
}

TEST_CASE("bad ladder settings are refused, naming the flag") {
  LadderSpec spec;
  spec.smallMicroBatch = 3;  // does not divide 4
  CHECK_THROWS_WITH_AS(ladderRungs(spec), doctest::Contains("--small-micro-batch 3 must divide --micro-batch 4"),
                       InvalidArgument);
  spec = {};
  spec.precision = "fp8";
  CHECK_THROWS_WITH_AS(checkSpec(spec), doctest::Contains("--precision"), InvalidArgument);
  spec = {};
  spec.lora.targets.clear();
  CHECK_THROWS_WITH_AS(checkSpec(spec), doctest::Contains("--lora-targets"), InvalidArgument);
  spec = {};
  spec.ranks = 0;
  CHECK_THROWS_WITH_AS(checkSpec(spec), doctest::Contains("--ranks"), InvalidArgument);
}

TEST_CASE("every rung's config loads with the Engine's reader and says what the rung does") {
  LadderSpec spec;
  spec.nvmePath = "/tmp/somewhere";
  for (const Rung& r : ladderRungs(spec)) {
    CAPTURE(r.name);
    const Config c = loadWritten(rungConfig(defaultBaseConfig(), spec, r), spec.ranks);
    CHECK(c.train_batch_size == 16);
    CHECK(static_cast<std::uint64_t>(c.train_micro_batch_size_per_gpu) == r.strategy.microBatch);
    CHECK(static_cast<std::uint64_t>(c.gradient_accumulation_steps) == r.strategy.gradAccum);
    CHECK(c.zero_optimization.stage == r.strategy.stage);
    CHECK(c.zero_optimization.offload_optimizer.device == r.strategy.offloadOptimizer);
    CHECK(c.zero_optimization.offload_param.device == r.strategy.offloadParam);
    if (r.strategy.offloadOptimizer != OffloadDevice::None) CHECK(c.zero_optimization.offload_optimizer.pin_memory);
    if (r.strategy.offloadOptimizer == OffloadDevice::Nvme) {
      REQUIRE(c.zero_optimization.offload_optimizer.nvme_path.size() == 1);
      CHECK(c.zero_optimization.offload_optimizer.nvme_path[0] == "/tmp/somewhere");
    }
    // Parameters on NVMe: every element of the shard, none kept in host memory.
    if (r.strategy.offloadParam == OffloadDevice::Nvme) {
      REQUIRE(c.zero_optimization.offload_param.nvme_path.size() == 1);
      CHECK(c.zero_optimization.offload_param.nvme_path[0] == "/tmp/somewhere");
      CHECK(c.zero_optimization.offload_param.max_in_cpu == 0);
    }
    CHECK(trainingPrecision(c) == DType::F32);  // the built-in base trains in fp32
    CHECK(deviceSpec(c).starts_with("host"));
  }
}

TEST_CASE("the config keeps the base's other keys, replaces its offload sections and sets the precision") {
  nlohmann::json base = defaultBaseConfig();
  base["optimizer"]["params"]["lr"] = 3e-4;
  base["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", "/x"}, {"buffer_count", 7}};
  base["fp16"] = {{"enabled", true}};
  LadderSpec spec;
  spec.precision = "bf16";
  const std::vector<Rung> rungs = ladderRungs(spec);
  const nlohmann::json z1 = rungConfig(base, spec, rungs[3]);
  CHECK(z1["optimizer"]["params"]["lr"] == 3e-4);
  CHECK(!z1["zero_optimization"].contains("offload_optimizer"));
  CHECK(!z1.contains("fp16"));
  CHECK(z1["bf16"]["enabled"] == true);
  CHECK(trainingPrecision(loadWritten(z1, spec.ranks)) == DType::BF16);
  spec.precision.clear();  // the base's precision stays
  CHECK(rungConfig(base, spec, rungs[3])["fp16"]["enabled"] == true);
}

TEST_CASE("zrt-train's command line carries the shape and the rung's levers") {
  LadderSpec spec;
  spec.model = {3, 48, 6, 40};
  spec.lora.rank = 4;
  spec.lora.alpha = 8;
  spec.lora.targets = {"qkv", "fc"};
  const std::vector<Rung> rungs = ladderRungs(spec);
  const RunFiles files{"/w/c.json", "/w/log.jsonl", "1073741824", ""};
  const std::vector<std::string> base = trainerArgs(spec, rungs[1], files, 7);
  CHECK(after(base, "--config") == "/w/c.json");
  CHECK(after(base, "--steps") == "7");
  CHECK(after(base, "--layers") == "3");
  CHECK(after(base, "--hidden") == "48");
  CHECK(after(base, "--heads") == "6");
  CHECK(after(base, "--seq-len") == "40");
  CHECK(after(base, "--json-log") == "/w/log.jsonl");
  CHECK(after(base, "--device-mem") == "1073741824");
  CHECK(!has(base, "--activation-checkpointing"));
  CHECK(!has(base, "--lora-rank"));
  CHECK(!has(base, "--data"));
  CHECK(has(trainerArgs(spec, rungs[2], files, 7), "--activation-checkpointing"));
  const std::vector<std::string> lora = trainerArgs(spec, rungs[8], {"c", "l", "1G", "/d.txt"}, 7);
  CHECK(after(lora, "--lora-rank") == "4");
  CHECK(after(lora, "--lora-alpha") == "8");
  CHECK(after(lora, "--lora-targets") == "qkv,fc");
  CHECK(after(lora, "--data") == "/d.txt");
}
