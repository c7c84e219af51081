// zrt-train's flags (tools/trainer/options.h): defaults, and every check CLI11 cannot make
// refuses with a message naming the flag.
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/build_config.h"
#include "core/error.h"
#include "options.h"

using namespace zrt::trainer;

namespace {

Options parse(std::vector<std::string> args) {
  Options o;
  CLI::App app;
  addFlags(app, o);
  args.insert(args.begin(), "--config=" + std::string(__FILE__));  // any existing file
  std::vector<const char*> argv{"zrt-train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  return o;
}

std::string refusal(const Options& o) {
  try {
    checkOptions(o);
  } catch (const zrt::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("defaults: the Debian licence text, a 4 x 256 GPT-2 at T 128") {
  const Options o = parse({});
  CHECK(o.data == "/usr/share/common-licenses/GPL-3");
  CHECK(o.layers == 4);
  CHECK(o.hidden == 256);
  CHECK(o.heads == 4);
  CHECK(o.seqLen == 128);
  CHECK(refusal(o).empty());
}

TEST_CASE("flags CLI11 checks: ranges and a missing config") {
  CHECK_THROWS_AS(parse({"--layers", "0"}), CLI::ValidationError);
  CHECK_THROWS_AS(parse({"--steps", "-1"}), CLI::ValidationError);
  CHECK_THROWS_AS(parse({"--no-such-flag"}), CLI::ExtrasError);
  Options o;
  CLI::App app;
  addFlags(app, o);
  const char* argv[] = {"zrt-train", "--config", "/nonexistent/config.json"};
  CHECK_THROWS_AS(app.parse(3, const_cast<char**>(argv)), CLI::ValidationError);
}

TEST_CASE("checks across flags name the flag") {
  CHECK(has(refusal(parse({"--hidden", "100", "--heads", "3"})), "--hidden 100 is not a multiple of --heads 3"));
  CHECK(has(refusal(parse({"--save-every", "10"})), "--save-every 10 needs --save-dir"));
  CHECK(refusal(parse({"--save-every", "10", "--save-dir", "/tmp/x"})).empty());
  CHECK(refusal(parse({"--save-dir", "/tmp/x"})).empty());
  CHECK(has(refusal(parse({"--resume"})), "--resume without a directory reads --save-dir"));
  CHECK(has(refusal(parse({"--resume", "/tmp/x", "--init-from", "m.safetensors"})),
            "--resume and --init-from exclude each other"));
  CHECK(refusal(parse({"--init-from", "m.safetensors"})).empty());
  CHECK(has(refusal(parse({"--checkpoint-offload"})), "--checkpoint-offload needs --activation-checkpointing"));
  CHECK(refusal(parse({"--checkpoint-offload", "--activation-checkpointing"})).empty());
  CHECK(has(refusal(parse({"--device", "tpu"})), "--device tpu: expected host, host-strict or cuda"));
  CHECK(has(refusal(parse({"--device-mem", "lots"})), "--device-mem"));
  CHECK(has(refusal(parse({"--save-on-signal"})), "--save-on-signal needs --save-dir"));
  CHECK(refusal(parse({"--save-on-signal", "--save-dir", "/tmp/x"})).empty());
  CHECK(parse({}).backend == "mpi");
  CHECK(has(refusal(parse({"--backend", "gloo"})), "--backend gloo: expected mpi or nccl"));
  if (ZRT_HAVE_NCCL) {
    CHECK(has(refusal(parse({"--backend", "nccl", "--device", "host"})),
              "--backend nccl needs --device cuda (NCCL moves GPU memory), not host"));
    CHECK(refusal(parse({"--backend", "nccl", "--device", "cuda"})).empty());
  } else {
    CHECK(has(refusal(parse({"--backend", "nccl"})), "--backend nccl: this build of ZRT has no NCCL"));
  }
}

TEST_CASE("the metrics endpoint: the config's unless a flag says otherwise") {
  CHECK(parse({}).metricsPort == -1);
  CHECK(parse({}).metricsAddress.empty());
  CHECK(parse({"--metrics-port", "9400"}).metricsPort == 9400);
  CHECK(parse({"--metrics-address", "0.0.0.0"}).metricsAddress == "0.0.0.0");
  CHECK_THROWS_AS(parse({"--metrics-port", "70000"}), CLI::ValidationError);
}

TEST_CASE("--resume: its own directory, else --save-dir; absent: not resuming") {
  CHECK_FALSE(parse({}).resume);
  CHECK(resumeDirectory(parse({})).empty());
  CHECK(resumeDirectory(parse({"--resume", "/ckpt/a", "--save-dir", "/ckpt/b"})) == "/ckpt/a");
  // A bare --resume followed by another flag takes no value from it.
  const Options bare = parse({"--resume", "--save-dir", "/ckpt/b", "--steps", "3"});
  CHECK(bare.resume);
  CHECK(bare.steps == 3);
  CHECK(resumeDirectory(bare) == "/ckpt/b");
  CHECK(resumeDirectory(parse({"--save-dir", "/ckpt/b", "--resume"})) == "/ckpt/b");
  CHECK_THROWS_AS(parse({"--save-every", "0", "--save-dir", "/x"}), CLI::ValidationError);
}

TEST_CASE("the device: the config's, overridden by --device and --device-mem; host-strict and cuda taken") {
  CHECK(deviceSpecFor(parse({}), "host:1073741824") == "host:1073741824");
  CHECK(deviceSpecFor(parse({"--device-mem", "2G"}), "host:1073741824") == "host:2147483648");
  CHECK(deviceSpecFor(parse({"--device", "host"}), "host:1024") == "host:1024");
  CHECK(deviceSpecFor(parse({"--device", "host"}), "cuda") == "host");
  CHECK(deviceSpecFor(parse({"--device", "cuda"}), "host") == "cuda:0");
  // "cuda" alone: this rank's GPU on its node, as DeepSpeed's local rank picks it.
  CHECK(deviceSpecFor(parse({"--device", "cuda"}), "host", 5, 4) == "cuda:1");
  CHECK(deviceSpecFor(parse({}), "cuda", 1, 2) == "cuda:1");
  CHECK(deviceSpecFor(parse({}), "cuda", 1, 1) == "cuda:0");
  CHECK(deviceSpecFor(parse({}), "cuda:1") == "cuda:1");
  CHECK(deviceSpecFor(parse({"--device", "cuda"}), "cuda:1") == "cuda:1");
  CHECK(deviceSpecFor(parse({"--device", "host-strict"}), "host") == "host-strict");
  CHECK(deviceSpecFor(parse({"--device-mem", "1G"}), "host-strict:1024") == "host-strict:1073741824");
  CHECK(deviceSpecFor(parse({"--device", "host"}), "host-strict:1024") == "host");
}

TEST_CASE("the progress line: on and off as asked; auto only on a terminal outside mpirun") {
  CHECK(progressLine(parse({"--progress", "on"}), false, true));
  CHECK_FALSE(progressLine(parse({"--progress", "off"}), true, false));
  CHECK(progressLine(parse({}), true, false));
  CHECK_FALSE(progressLine(parse({}), true, true));
  CHECK_FALSE(progressLine(parse({}), false, false));
  CHECK_THROWS_AS(parse({"--progress", "sometimes"}), CLI::ValidationError);
}

TEST_CASE("LoRA flags: off by default; alpha defaults to the rank, targets to qkv; refusals name the flag") {
  CHECK_FALSE(loraConfigOf(parse({})).enabled());
  const LoraConfig d = loraConfigOf(parse({"--lora-rank", "8"}));
  CHECK(d.rank == 8);
  CHECK(d.alpha == 8.0);
  CHECK(d.scaling() == 1.0);
  CHECK(d.targets == std::vector<LoraTarget>{LoraTarget::Qkv});
  // Any order in, LoraTarget order out; "all" is every layer.
  const LoraConfig c = loraConfigOf(parse({"--lora-rank", "4", "--lora-alpha", "16", "--lora-targets", "mlp_proj,qkv,fc"}));
  CHECK(c.scaling() == 4.0);
  CHECK(c.targets == std::vector<LoraTarget>{LoraTarget::Qkv, LoraTarget::Fc, LoraTarget::MlpProj});
  CHECK(loraConfigOf(parse({"--lora-rank", "4", "--lora-targets", "all"})).targets.size() == 4);
  CHECK(joinFlagNames(c.targets) == "qkv,fc,mlp_proj");
  CHECK(refusal(parse({"--lora-rank", "4", "--lora-targets", "proj,fc"})).empty());

  CHECK(has(refusal(parse({"--lora-alpha", "16"})), "--lora-alpha needs --lora-rank"));
  CHECK(has(refusal(parse({"--lora-targets", "qkv"})), "--lora-targets needs --lora-rank"));
  CHECK(has(refusal(parse({"--lora-rank", "4", "--lora-targets", "qkv,attn"})),
            "--lora-targets: unknown layer 'attn' (known: qkv, proj, fc, mlp_proj, all)"));
  CHECK(has(refusal(parse({"--lora-rank", "4", "--lora-targets", "fc,fc"})), "'fc' is given twice"));
  CHECK(has(refusal(parse({"--lora-rank", "4", "--lora-targets", "qkv,,fc"})), "an empty name"));
  CHECK(has(refusal(parse({"--lora-rank", "300"})), "--lora-rank 300 exceeds the model's width --hidden 256"));
  CHECK(refusal(parse({"--lora-rank", "256"})).empty());
  CHECK_THROWS_AS(parse({"--lora-rank", "-1"}), CLI::ValidationError);
  CHECK_THROWS_AS(parse({"--lora-rank", "4", "--lora-alpha", "0"}), CLI::ValidationError);
  // PEFT's names for the targets, and the layers they are.
  CHECK(peftTargetName(LoraTarget::Qkv) == "c_attn");
  CHECK(peftTargetName(LoraTarget::Proj) == "attn.c_proj");
  CHECK(peftTargetName(LoraTarget::Fc) == "c_fc");
  CHECK(peftTargetName(LoraTarget::MlpProj) == "mlp.c_proj");
  CHECK(loraAName(3, LoraTarget::MlpProj) == "h.3.mlp.c_proj.lora_A.weight");
  CHECK(loraBName(0, LoraTarget::Proj) == "h.0.attn.c_proj.lora_B.weight");
}
