#include "options.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/units.h"

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
  app.add_option("--save-every", o.saveEvery, "checkpoint every K steps (not available yet: issue 13)");
  app.add_option("--save-dir", o.saveDir, "checkpoint directory (not available yet: issue 13)");
  app.add_option("--resume", o.resume, "resume from a checkpoint (not available yet: issue 13)");
  app.add_option("--init-from", o.initFrom,
                 "starting weights from a safetensors file or checkpoint (not available yet: issue 13)");
  app.add_flag("--activation-checkpointing", o.activationCheckpointing,
               "keep only each block's input and recompute the block in backward");
  app.add_flag("--checkpoint-offload", o.checkpointOffload,
               "with --activation-checkpointing: keep those inputs in pinned host memory");
  app.add_option("--device", o.device, "host or cuda (default: the config's zrt.device)");
  app.add_option("--device-mem", o.deviceMem,
                 "capacity of the host device, e.g. 2G (default: the config's zrt.host_device_memory)");
  app.add_option("--json-log", o.jsonLog, "write one JSON line per step to this file");
  app.add_option("--progress", o.progress,
                 "on: one progress line with ETA rewritten in place; off: a line per step; auto: on "
                 "when stdout is a terminal outside mpirun")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

void checkOptions(const Options& o) {
  if (o.hidden % o.heads != 0)
    ZRT_THROW(InvalidArgument, "--hidden ", o.hidden, " is not a multiple of --heads ", o.heads);
  const char* checkpointFlag = o.saveEvery != 0     ? "--save-every"
                               : !o.saveDir.empty()  ? "--save-dir"
                               : !o.resume.empty()   ? "--resume"
                               : !o.initFrom.empty() ? "--init-from"
                                                     : nullptr;
  if (checkpointFlag)
    ZRT_THROW(InvalidArgument, checkpointFlag,
              ": not available yet (checkpoints are issue 13, not built); run without it");
  if (o.checkpointOffload && !o.activationCheckpointing)
    ZRT_THROW(InvalidArgument, "--checkpoint-offload needs --activation-checkpointing");
  if (!o.device.empty() && o.device != "host" && o.device != "cuda")
    ZRT_THROW(InvalidArgument, "--device ", o.device, ": expected host or cuda");
  if (!o.deviceMem.empty()) parseBytes(o.deviceMem, "--device-mem");
  if (!o.deviceMem.empty() && o.device == "cuda")
    ZRT_THROW(InvalidArgument, "--device-mem sets the host device's capacity; it does not apply to --device cuda");
}

std::string deviceSpecFor(const Options& o, const std::string& configSpec) {
  std::string spec = configSpec;
  if (!o.device.empty() && spec.rfind(o.device, 0) != 0) spec = o.device;
  if (!o.deviceMem.empty()) spec = "host:" + std::to_string(parseBytes(o.deviceMem, "--device-mem"));
  // The model's forward and backward are CPU code reading device memory directly; its CUDA path
  // comes with the GPU issue, so a cuda device would hand it pointers it cannot read.
  if (spec.rfind("cuda", 0) == 0)
    ZRT_THROW(InvalidArgument, "--device cuda", o.device.empty() ? " (from the config's zrt.device)" : "",
              ": not available yet (the model's CUDA path comes with the GPU issue); use --device host");
  return spec;
}

bool progressLine(const Options& o, bool stdoutIsTerminal, bool startedByMpirun) {
  if (o.progress == "on") return true;
  if (o.progress == "off") return false;
  return stdoutIsTerminal && !startedByMpirun;
}

}  // namespace zrt::trainer
