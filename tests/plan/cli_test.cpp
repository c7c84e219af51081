// zrt-plan's command line, run in-process through runPlan(): JSON keys, --explain's numbers,
// --write-config, input files, and bad input (exit 2 with a message naming the flag).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "tools/plan/cli.h"

using namespace zrt::plan;

namespace {

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = runPlan(args, out, err);
  return {code, out.str(), err.str()};
}

// A scratch directory removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zrt-plan-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

const std::vector<std::string> kShape = {"--layers", "32", "--hidden", "4096", "--heads", "32",
                                         "--vocab", "32000", "--seq-len", "4096"};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("--json: every strategy has the documented keys and `recommended` names one") {
  const Result r = run(kShape + std::vector<std::string>{"--micro-batch", "4", "--world-size", "8",
                                                         "--host-mem", "1T", "--lora-rank", "16", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("strategies"));
  REQUIRE(j["strategies"].is_array());
  CHECK(j["strategies"].size() == 40);
  bool named = false;
  for (const auto& s : j["strategies"]) {
    for (const char* key : {"id", "stage", "offload_optimizer", "offload_param", "activation_checkpointing", "lora",
                            "device_bytes", "host_bytes", "nvme_bytes", "model_state_device_bytes", "fits",
                            "breakdown", "slowdown", "micro_batch"}) {
      CHECK_MESSAGE(s.contains(key), key);
    }
    CHECK(s["device_bytes"].get<std::uint64_t>() >= s["model_state_device_bytes"].get<std::uint64_t>());
    if (s["id"] == j["recommended"]) named = true;
  }
  CHECK(named);
  CHECK(j["recommendation"]["fits"] == true);
  CHECK(j["rule"].get<std::string>().find("activation checkpointing") != std::string::npos);
}

TEST_CASE("the table and --explain show the formulas with the numbers substituted") {
  const Result r = run({"--params", "7e9", "--world-size", "8", "--host-mem", "1T", "--explain"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("K = 4·(1 + 2) = 12") != std::string::npos);
  CHECK(r.out.find("p·Ψ' = 2·7000000000 = 14000000000 B (14.00 GB)") != std::string::npos);
  CHECK(r.out.find("8·Ψ' = 8·7000000000 = 56000000000 B (56.00 GB)") != std::string::npos);
  CHECK(r.out.find("(p + p + K)·Ψ with N = 8 -> 112000000000 B") != std::string::npos);
  // The recommendation (stage 1/2 across 8 ranks) is explained too: Ψ'/N = 875,000,000.
  CHECK(r.out.find("4·Ψ'/N' = 4·875000000 = 3500000000 B") != std::string::npos);
  CHECK(r.out.find("Recommended: ") != std::string::npos);

  const Result shape = run(kShape + std::vector<std::string>{"--micro-batch", "1", "--explain"});
  REQUIRE(shape.code == 0);
  // One layer: 34·4096·1·4096 + 5·32·4096²·1 = 570,425,344 + 2,684,354,560.
  CHECK(shape.out.find("= 3254779904 B") != std::string::npos);
  CHECK(shape.out.find("12·L·h² + V·h = 12·32·4096² + 32000·4096 = 6573522944") != std::string::npos);
}

TEST_CASE("bad input: a clear message naming the flag, exit 2") {
  struct Case {
    std::vector<std::string> args;
    const char* mentions;
  };
  const Case cases[] = {
      {{"--params", "7X"}, "--params"},
      {{"--params", "7B", "--micro-batch", "0"}, "--micro-batch"},
      {{"--params", "7B", "--micro-batch", "two"}, "--micro-batch"},
      {{"--params", "7B", "--precision", "fp8"}, "--precision"},
      {{"--params", "7B", "--optimizer", "lion"}, "--optimizer"},
      {{"--params", "7B", "--device-mem", "lots"}, "--device-mem"},
      {{"--params", "7B", "--host-mem", "-1G"}, "--host-mem"},
      {{"--params", "7B", "--stage", "4"}, "--stage"},
      {{"--params", "7B", "--offload", "cpu"}, "--offload"},
      {{"--params", "7B", "--stage", "2", "--offload-param", "cpu"}, "--offload-param"},
      {{"--params", "7B", "--world-size", "6", "--ranks-per-node", "4"}, "--world-size"},
      {{"--params", "7B", "--momentum", "0.9"}, "--momentum"},
      {{"--params", "7B", "--lora-rank", "8"}, "--lora-rank"},
      {{"--params", "7B", "--layers", "32"}, "--params"},
      {{"--layers", "32", "--hidden", "4096"}, "--heads"},
      {{"--layers", "2", "--hidden", "10", "--heads", "3", "--vocab", "5"}, "--heads"},
      {{"--manifest", "/nonexistent/m.json"}, "--manifest"},
      {{"--params", "7B", "--nvme-bench", "/nonexistent/io.json"}, "--nvme-bench"},
      {{"--params", "7B", "--bogus"}, "--bogus"},
      // Sizes whose products overflow 64 bits, or a micro-batch whose divisors would take
      // hours to try: an error, never a hang or a wrapped (small, wrong) figure.
      {{"--params", "7B", "--micro-batch", "1000000000000"}, "--micro-batch"},
      {{"--params", "7B", "--micro-batch", "16777216", "--grad-accum", "999999999999999999"},
       "overflows 64 bits"},
      {{"--layers", "1", "--hidden", "10000000000", "--heads", "1", "--vocab", "1"},
       "12·L·h² + V·h overflows"},
      {{"--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "100", "--seq-len",
        "100000000000"},
       "overflows 64 bits"},
      {{}, "--params"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO("zrt-plan " << joined << "-> " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.mentions) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("a manifest, with LoRA on its projections") {
  TempDir dir;
  const auto file = dir.write("m.json", R"({"format": "zrt-manifest", "version": 1,
    "model": {"layers": 1, "hidden": 64, "heads": 4, "vocab": 100},
    "tensors": [
      {"name": "embed.weight", "shape": [100, 64], "dtype": "bf16"},
      {"name": "layers.0.attn.q_proj.weight", "shape": [64, 64]},
      {"name": "layers.0.attn.v_proj.weight", "shape": [64, 64]},
      {"name": "layers.0.norm.weight", "shape": [64], "trainable": false}]})");
  const Result r = run({"--manifest", file.string(), "--lora-rank", "2", "--lora-targets", "q,v", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["model"]["params"] == 100 * 64 + 2 * 64 * 64 + 64);
  CHECK(j["model"]["trainable_params"] == 100 * 64 + 2 * 64 * 64);
  CHECK(j["lora"]["adapter_params"] == 2 * 2 * (64 + 64));
  CHECK(j["model"]["hidden"] == 64);

  const auto broken = dir.write("broken.json", R"({"tensors": [{"name": "w", "shape": "big"}]})");
  const Result bad = run({"--manifest", broken.string()});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("broken.json: tensors[0]") != std::string::npos);

  // Element counts that overflow 64 bits, in one tensor or summed over several.
  const auto huge = dir.write("huge.json", R"({"tensors": [{"name": "a", "shape": [4294967296, 4294967296]}]})");
  const Result h = run({"--manifest", huge.string()});
  CHECK(h.code == 2);
  CHECK(h.err.find("huge.json: tensors[0] (a)") != std::string::npos);
  CHECK(h.err.find("overflows") != std::string::npos);
  const auto many = dir.write("many.json", R"({"tensors": [{"name": "a", "shape": [4294967296, 4294967295]},
                                                          {"name": "b", "shape": [4294967296, 4294967295]}]})");
  const Result h2 = run({"--manifest", many.string()});
  CHECK(h2.code == 2);
  CHECK(h2.err.find("many.json") != std::string::npos);
  CHECK(h2.err.find("overflows") != std::string::npos);
}

TEST_CASE("--nvme-bench takes the NVMe bandwidth from a zrt-io result file") {
  TempDir dir;
  const auto file = dir.write("io.json",
                              "{\"mode\": \"read\", \"block_size\": 1048576, \"queue_depth\": 32, \"threads\": 4, "
                              "\"bytes\": 4294967296, \"seconds\": 0.8, \"gbps\": 5.37}\n"
                              "{\"mode\": \"write\", \"block_size\": 1048576, \"queue_depth\": 32, \"threads\": 4, "
                              "\"bytes\": 4294967296, \"seconds\": 1.6, \"gbps\": 2.68}\n");
  const Result r = run({"--params", "7B", "--nvme-bench", file.string(), "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["hardware"]["nvme_read_bytes_per_s"].get<double>() == doctest::Approx(5.37e9));
  CHECK(j["hardware"]["nvme_write_bytes_per_s"].get<double>() == doctest::Approx(2.68e9));
  CHECK(j["hardware"]["nvme_bandwidth_source"].get<std::string>().find("io.json") != std::string::npos);
  const auto empty = dir.write("empty.json", "\n");
  CHECK(run({"--params", "7B", "--nvme-bench", empty.string()}).code == 2);
}

TEST_CASE("--write-config writes the recommendation as a DeepSpeed config") {
  TempDir dir;
  const auto file = dir.path / "ds.json";
  const Result r = run(kShape + std::vector<std::string>{"--micro-batch", "4", "--world-size", "8", "--host-mem",
                                                         "1T", "--pin-memory", "--write-config", file.string(),
                                                         "--json"});
  REQUIRE(r.code == 0);
  const auto plan = nlohmann::json::parse(r.out);
  std::ifstream in(file);
  REQUIRE(in.good());
  const auto cfg = nlohmann::json::parse(in);
  const auto& rec = plan["recommendation"];
  CHECK(cfg["zero_optimization"]["stage"] == rec["stage"]);
  CHECK(cfg["train_micro_batch_size_per_gpu"] == rec["micro_batch"]);
  CHECK(cfg["gradient_accumulation_steps"] == rec["gradient_accumulation_steps"]);
  CHECK(cfg["train_batch_size"] == rec["micro_batch"].get<int>() * rec["gradient_accumulation_steps"].get<int>() * 8);
  CHECK(cfg["fp16"]["enabled"] == true);
  CHECK(r.err.find("wrote") != std::string::npos);

  // Nothing fits: nothing is written, exit 1.
  const auto none = dir.path / "none.json";
  const Result n = run({"--params", "70B", "--device-mem", "1G", "--write-config", none.string()});
  CHECK(n.code == 1);
  CHECK_FALSE(std::filesystem::exists(none));
}

TEST_CASE("--write-config round trip: zrt::loadConfig reads the recommendation back, and it is then 'no change'") {
  TempDir dir;
  const std::vector<std::vector<std::string>> scenarios = {
      {"--world-size", "1", "--device-mem", "80G", "--host-mem", "1T", "--pin-memory"},        // CPU offload
      {"--world-size", "1", "--device-mem", "80G", "--host-mem", "64G", "--nvme", "4T"},       // NVMe offload
      {"--world-size", "8", "--device-mem", "24G", "--host-mem", "1T", "--checkpointing",
       "--flash-attention"},                                                                   // stage 3
      {"--world-size", "8", "--micro-batch", "4", "--grad-accum", "2", "--precision", "bf16"},  // accumulation
  };
  int i = 0;
  for (const auto& scenario : scenarios) {
    const auto file = dir.path / ("ds" + std::to_string(i++) + ".json");
    const auto args = kShape + scenario;
    const Result r = run(args + std::vector<std::string>{"--json", "--write-config", file.string()});
    REQUIRE(r.code == 0);
    const auto plan = nlohmann::json::parse(r.out);
    const auto& rec = plan["recommendation"];
    const int world = plan["hardware"]["world_size"];
    INFO("recommended " << plan["recommended"].get<std::string>());

    const zrt::Config c = zrt::loadConfig(file, world);
    CHECK(c.zero_optimization.stage == rec["stage"].get<int>());
    CHECK(std::string(zrt::nameOf(c.zero_optimization.offload_optimizer.device)) == rec["offload_optimizer"]);
    CHECK(std::string(zrt::nameOf(c.zero_optimization.offload_param.device)) == rec["offload_param"]);
    CHECK(c.train_micro_batch_size_per_gpu == rec["micro_batch"].get<std::int64_t>());
    CHECK(c.gradient_accumulation_steps == rec["gradient_accumulation_steps"].get<std::int64_t>());
    CHECK(c.train_batch_size == rec["micro_batch"].get<std::int64_t>() *
                                    rec["gradient_accumulation_steps"].get<std::int64_t>() * world);
    const std::string precision = plan["training"]["precision"];
    CHECK(c.fp16.enabled == (precision == "fp16"));
    CHECK(c.bf16.enabled == (precision == "bf16"));
    if (rec["offload_optimizer"] != "none")
      CHECK(c.zero_optimization.offload_optimizer.pin_memory == plan["training"]["pin_memory"].get<bool>());
    if (rec["offload_optimizer"] == "nvme") CHECK(c.zero_optimization.offload_optimizer.nvme_path.size() == 1);

    // Planned again from the written config, the recommendation is to change nothing (the
    // checkpointing flag is model code, so it is passed again).
    std::vector<std::string> again = kShape;
    for (std::size_t k = 0; k < scenario.size(); ++k) {
      const std::string& a = scenario[k];
      if (a == "--micro-batch" || a == "--grad-accum" || a == "--precision") {
        ++k;
        continue;
      }
      if (a == "--checkpointing" && !rec["activation_checkpointing"].get<bool>()) continue;
      again.push_back(a);
    }
    if (rec["activation_checkpointing"].get<bool>() && std::find(again.begin(), again.end(), "--checkpointing") == again.end())
      again.push_back("--checkpointing");
    const Result r2 = run(again + std::vector<std::string>{"--config", file.string(), "--json"});
    REQUIRE(r2.code == 0);
    const auto plan2 = nlohmann::json::parse(r2.out);
    CHECK(plan2["baseline"] == plan["recommended"]);
    CHECK(plan2["recommended"] == plan["recommended"]);
    CHECK(plan2["recommendation"]["lever"] == "no change");
    CHECK(plan2["recommendation"]["micro_batch"] == rec["micro_batch"]);
  }
}

TEST_CASE("--config: the current strategy, precision and buckets come from the file; flags win") {
  TempDir dir;
  const auto file = dir.write("zero2.json", R"({
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8,
                          "overlap_comm": true, "contiguous_gradients": true}})");
  const Result r = run(kShape + std::vector<std::string>{"--world-size", "4", "--config", file.string(), "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["baseline"] == "z2");
  CHECK(j["training"]["precision"] == "bf16");
  CHECK(j["training"]["optimizer"] == "AdamW");
  CHECK(j["training"]["reduce_bucket_size"] == 200000000);
  CHECK(j["training"]["overlap_comm"] == true);
  for (const auto& s : j["strategies"]) {
    if (s["id"] == "z2") {
      CHECK(s["micro_batch"] == 2);
      CHECK(s["gradient_accumulation_steps"] == 3);
      // Two staging buffers (overlap_comm) of the largest bucket, in host memory. Every layer
      // tensor is a multiple of h² = 16,777,216 elements (q, k, v, o h², fc1 and fc2 4h²), and
      // backward fills buckets of at most 2e8 with 11·h² = 184,549,376 (12·h² would pass 2e8;
      // the embedding's bucket, 131,072,000 + 2·h², is smaller). bf16 with 3 accumulation steps
      // sums in the fp32 accumulator, so no receive buffers.
      CHECK(s["breakdown"]["device"]["comm_buckets"] == 0);
      CHECK(s["breakdown"]["host"]["comm_buckets"] == 2ull * 184549376 * 2);
    }
  }

  const Result flags = run(kShape + std::vector<std::string>{"--world-size", "4", "--config", file.string(), "--stage",
                                                             "1", "--micro-batch", "1", "--json"});
  REQUIRE(flags.code == 0);
  const auto jf = nlohmann::json::parse(flags.out);
  CHECK(jf["baseline"] == "z1");
  CHECK(jf["strategies"][0]["micro_batch"] == 1);

  // --write-config keeps what the plan does not decide.
  const auto out = dir.path / "out.json";
  REQUIRE(run(kShape + std::vector<std::string>{"--world-size", "4", "--device-mem", "40G", "--config", file.string(),
                                                "--write-config", out.string()})
              .code == 0);
  std::ifstream in(out);
  const auto written = nlohmann::json::parse(in);
  CHECK(written["gradient_clipping"] == 1.0);
  CHECK(written["optimizer"]["params"]["lr"] == 3e-4);
  CHECK(written["zero_optimization"]["contiguous_gradients"] == true);
  CHECK_NOTHROW(zrt::loadConfig(out, 4));

  // DeepSpeed's deprecated cpu_offload stands for offload_optimizer: the written config says the
  // strategy once, in the current form, whichever strategy is recommended.
  const auto deprecated = dir.write("deprecated.json",
                                    R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  // 24G: CPU offload recommended; 400G with --offload none: no offload (cpu_offload, kept,
  // would have turned it back on).
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--device-mem", "24G"},
        std::vector<std::string>{"--device-mem", "400G", "--offload", "none"}}) {
    CAPTURE(extra[1]);
    const auto out3 = dir.path / "out3.json";
    std::vector<std::string> args = kShape;
    for (const char* a : {"--world-size", "8", "--ranks-per-node", "8", "--host-mem", "1T"})
      args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    for (const std::string& a : {std::string("--config"), deprecated.string(), std::string("--json"),
                                 std::string("--write-config"), out3.string()})
      args.push_back(a);
    const Result d = run(args);
    REQUIRE(d.code == 0);
    const auto plan3 = nlohmann::json::parse(d.out);
    std::ifstream in3(out3);
    const auto written3 = nlohmann::json::parse(in3);
    CHECK_FALSE(written3["zero_optimization"].contains("cpu_offload"));
    zrt::Config loaded;
    REQUIRE_NOTHROW(loaded = zrt::loadConfig(out3, 8));
    CHECK(std::string(zrt::nameOf(loaded.zero_optimization.offload_optimizer.device)) ==
          plan3["recommendation"]["offload_optimizer"]);
  }

  // bfloat16 (DeepSpeed's old name for bf16) and a stage-3-only offload ratio in the base config:
  // the config written for a stage 2 strategy loads, in bf16, without the ratio.
  const auto old = dir.write("old.json", R"({"bfloat16": {"enabled": true}, "zero_optimization":
    {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  const auto out4 = dir.path / "out4.json";
  const Result o4 = run(kShape + std::vector<std::string>{"--world-size", "8", "--ranks-per-node", "8",
                                                          "--host-mem", "1T", "--device-mem", "400G", "--stage",
                                                          "2", "--config", old.string(), "--write-config",
                                                          out4.string()});
  REQUIRE(o4.code == 0);
  zrt::Config loaded4;
  REQUIRE_NOTHROW(loaded4 = zrt::loadConfig(out4, 8));
  CHECK(loaded4.bf16.enabled);
  CHECK(loaded4.zero_optimization.stage == 2);
  CHECK(loaded4.zero_optimization.offload_optimizer.ratio == 1.0);

  // Comments are allowed in configs (the config reader allows them, as DeepSpeed's loader
  // does), in --config as everywhere, --write-config included.
  const auto commented = dir.write("commented.json", R"({
    // ZeRO-2 on four ranks
    "zero_optimization": {"stage": 2, /* as trained now */ "reduce_bucket_size": 2e8}})");
  const auto out2 = dir.path / "out2.json";
  const Result c = run(kShape + std::vector<std::string>{"--world-size", "4", "--config", commented.string(),
                                                         "--json", "--write-config", out2.string()});
  CHECK(c.code == 0);
  CHECK(c.err.find("zrt-plan: wrote") != std::string::npos);
  if (c.code == 0) CHECK(nlohmann::json::parse(c.out)["baseline"] == "z2");
  CHECK_NOTHROW(zrt::loadConfig(out2, 4));

  // A bad config names the file and the key.
  const auto bad = dir.write("bad.json", R"({"zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}})");
  const Result b = run({"--params", "7B", "--config", bad.string()});
  CHECK(b.code == 2);
  CHECK(b.err.find("bad.json") != std::string::npos);
  CHECK(b.err.find("reduce_bucket_sise") != std::string::npos);
}
