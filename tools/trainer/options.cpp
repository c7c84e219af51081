#include "options.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/build_config.h"
#include "core/error.h"
#include "core/units.h"
#include "tools/common/progress.h"

namespace zrt::trainer {

void addFlags(CLI::App& app, Options& o) {
  app.add_option("--config", o.config, "DeepSpeed-format config (batch sizes, optimizer, ZeRO stage)")
      ->required()
      ->check(CLI::ExistingFile);
  // The data file is checked by loadText, which names the flag and also checks its length.
  app.add_option("--data", o.data, "text file to train on, read as bytes")->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--hidden", o.hidden, "model width")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads (must divide --hidden)")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--seq-len", o.seqLen, "sequence length T (also the position table's rows)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
  app.add_option("--eval-every", o.evalEvery, "validate every K steps (0: only after the last)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  app.add_option("--eval-batches", o.evalBatches, "global batches of validation text per evaluation")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--save-every", o.saveEvery, "with --save-dir: also save after every K-th step (tag stepN)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--save-dir", o.saveDir, "save a checkpoint here after the last step (and every --save-every)");
  // The directory is optional (`--resume` alone reads --save-dir), so the flag's presence is
  // recorded apart from its value: CLI11 gives no value and no call for a bare optional option.
  app.add_option_function<std::vector<std::string>>(
         "--resume",
         [&o](const std::vector<std::string>& v) {
           o.resume = true;
           o.resumeDir = v.empty() ? "" : v.front();
         },
         "continue from the latest checkpoint in DIR (default: --save-dir)")
      ->expected(0, 1)
      ->type_name("[DIR]");
  app.add_option("--init-from", o.initFrom,
                 "starting weights only, from a checkpoint directory or a safetensors file (ZRT's or "
                 "Hugging Face's GPT-2 names); training starts at step 0");
  app.add_flag("--activation-checkpointing", o.activationCheckpointing,
               "keep only each block's input and recompute the block in backward");
  app.add_flag("--checkpoint-offload", o.checkpointOffload,
               "with --activation-checkpointing: keep those inputs in pinned host memory");
  app.add_option("--device", o.device, "host, host-strict or cuda (default: the config's zrt.device)");
  app.add_option("--backend", o.backend,
                 "collectives for the model's data (gradient buckets, parameter gathers): mpi, or nccl "
                 "on --device cuda with a GPU per rank (the engine's agreements stay on MPI; default mpi)");
  app.add_option("--device-mem", o.deviceMem,
                 "capacity of the host device, e.g. 2G (default: the config's zrt.host_device_memory)");
  app.add_option("--json-log", o.jsonLog, "write one JSON line per step to this file, and rank 0's memory ledger in bytes after the last");
  app.add_option("--progress", o.progress,
                 "on: one progress line with ETA rewritten in place; off: a line per step; auto: on "
                 "when stdout is a terminal outside mpirun")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--lora-rank", o.loraRank,
                 "train LoRA adapters of this rank on --lora-targets, every base parameter frozen (0: off)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--lora-alpha", o.loraAlpha, "LoRA's alpha: adapters add (alpha / rank) B A x (default: the rank)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lora-targets", o.loraTargets,
                 "layers that get adapters, comma-separated: qkv (attn.c_attn), proj (attn.c_proj), fc (mlp.c_fc), "
                 "mlp_proj (mlp.c_proj), all (default: qkv)");
  app.add_option("--metrics-port", o.metricsPort,
                 "rank 0 serves Prometheus metrics at http://ADDRESS:PORT/metrics; 0: off (default: the "
                 "config's zrt.metrics_port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", o.metricsAddress,
                 "the IP address the metrics endpoint listens on (default: the config's zrt.metrics_address, "
                 "127.0.0.1)");
  app.add_flag("--save-on-signal", o.saveOnSignal,
               "on SIGINT/SIGTERM/SIGUSR1 (under mpirun: kill -USR1 <mpirun>), stop every rank at the step "
               "boundary, save to --save-dir and exit 3 (docs/metrics.md)");
}

void checkOptions(const Options& o) {
  if (o.hidden % o.heads != 0)
    ZRT_THROW(InvalidArgument, "--hidden ", o.hidden, " is not a multiple of --heads ", o.heads);
  if (o.saveEvery != 0 && o.saveDir.empty())
    ZRT_THROW(InvalidArgument, "--save-every ", o.saveEvery, " needs --save-dir (where the checkpoints go)");
  if (o.resume && o.resumeDir.empty() && o.saveDir.empty())
    ZRT_THROW(InvalidArgument, "--resume without a directory reads --save-dir, which is not given: "
              "use --resume DIR or add --save-dir DIR");
  // A resume restores the weights too; taking them from elsewhere as well would leave it unclear
  // which won.
  if (o.resume && !o.initFrom.empty())
    ZRT_THROW(InvalidArgument, "--resume and --init-from exclude each other (--resume restores the weights too)");
  if (o.saveOnSignal && o.saveDir.empty())
    ZRT_THROW(InvalidArgument, "--save-on-signal needs --save-dir (where the checkpoint goes)");
  if (o.checkpointOffload && !o.activationCheckpointing)
    ZRT_THROW(InvalidArgument, "--checkpoint-offload needs --activation-checkpointing");
  if (!o.device.empty() && o.device != "host" && o.device != "host-strict" && o.device != "cuda")
    ZRT_THROW(InvalidArgument, "--device ", o.device, ": expected host, host-strict or cuda");
  if (!o.deviceMem.empty()) parseBytes(o.deviceMem, "--device-mem");
  if (o.backend != "mpi" && o.backend != "nccl")
    ZRT_THROW(InvalidArgument, "--backend ", o.backend, ": expected mpi or nccl");
  if (o.backend == "nccl" && !ZRT_HAVE_NCCL)
    ZRT_THROW(InvalidArgument, "--backend nccl: this build of ZRT has no NCCL (configure with NCCL installed)");
  if (o.backend == "nccl" && !o.device.empty() && o.device != "cuda")
    ZRT_THROW(InvalidArgument, "--backend nccl needs --device cuda (NCCL moves GPU memory), not ", o.device);
  if (!o.deviceMem.empty() && o.device == "cuda")
    ZRT_THROW(InvalidArgument, "--device-mem sets the host device's capacity; it does not apply to --device cuda");
  if (o.loraRank == 0 && o.loraAlpha != 0)
    ZRT_THROW(InvalidArgument, "--lora-alpha needs --lora-rank (LoRA is off without it)");
  if (o.loraRank == 0 && !o.loraTargets.empty())
    ZRT_THROW(InvalidArgument, "--lora-targets needs --lora-rank (LoRA is off without it)");
  if (o.loraRank > 0) validate(loraConfigOf(o), o.hidden);
}

LoraConfig loraConfigOf(const Options& o) {
  LoraConfig c;
  if (o.loraRank <= 0) return c;
  c.rank = o.loraRank;
  c.alpha = o.loraAlpha != 0 ? o.loraAlpha : o.loraRank;
  c.targets = parseLoraTargets(o.loraTargets.empty() ? "qkv" : o.loraTargets);
  return c;
}

std::string resumeDirectory(const Options& o) {
  if (!o.resume) return "";
  return o.resumeDir.empty() ? o.saveDir : o.resumeDir;
}

std::string deviceSpecFor(const Options& o, const std::string& configSpec, int rankOnNode, int visibleGpus) {
  std::string spec = configSpec;
  if (!o.device.empty() && spec.substr(0, spec.find(':')) != o.device) spec = o.device;
  if (spec == "cuda") spec = "cuda:" + std::to_string(visibleGpus > 0 ? rankOnNode % visibleGpus : 0);
  if (!o.deviceMem.empty())
    spec = (spec.rfind("host-strict", 0) == 0 ? "host-strict:" : "host:") +
           std::to_string(parseBytes(o.deviceMem, "--device-mem"));
  return spec;
}

bool progressLine(const Options& o, bool stdoutIsTerminal, bool startedByMpirun) {
  return tools::rewriteProgress(o.progress, stdoutIsTerminal, startedByMpirun);
}

}  // namespace zrt::trainer
