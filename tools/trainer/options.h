// zrt-train's command line: the flags of issue 16 as plain data, how they are declared to CLI11,
// and the checks that need more than one flag or that CLI11 cannot express. Batch sizes and the
// learning rate are not flags: they come from the DeepSpeed config, as in DeepSpeed.
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "model/lora.h"

namespace CLI {
class App;
}

namespace zrt::trainer {

struct Options {
  std::string config;
  std::string data = "/usr/share/common-licenses/GPL-3";
  std::int64_t steps = 200;
  int layers = 4;
  int hidden = 256;
  int heads = 4;
  int seqLen = 128;
  std::uint64_t seed = 1234;
  std::int64_t evalEvery = 50;  // 0: validate only after the last step
  std::int64_t evalBatches = 4;
  std::int64_t saveEvery = 0;  // 0: save only after the last step (when --save-dir is given)
  std::string saveDir;
  bool resume = false;
  std::string resumeDir;  // empty with resume: --save-dir
  std::string initFrom;
  bool activationCheckpointing = false;
  bool checkpointOffload = false;
  std::string device;     // empty: the config's zrt.device
  std::string deviceMem;  // empty: the config's zrt.host_device_memory
  std::string backend = "mpi";  // the model's data (buckets, gathers): mpi or nccl
  std::string jsonLog;
  std::string progress = "auto";  // auto, on, off
  int loraRank = 0;               // 0: no adapters, every parameter trains
  double loraAlpha = 0;           // 0: the rank (scaling 1)
  std::string loraTargets;        // empty: "qkv" (PEFT's default for GPT-2, c_attn)
  int metricsPort = -1;           // -1: the config's zrt.metrics_port; 0: off
  std::string metricsAddress;     // empty: the config's zrt.metrics_address
  bool saveOnSignal = false;      // SIGINT/SIGTERM: save at the step boundary, exit 3
};

// Declares every flag on `app`, bound to `o`.
void addFlags(CLI::App& app, Options& o);

// Throws InvalidArgument naming the flag for what CLI11's per-flag checks cannot see: a width
// the heads do not divide, --save-every without --save-dir, --resume with no directory, --resume
// with --init-from, --checkpoint-offload without --activation-checkpointing, an unknown
// --device, a --device-mem that is not a size, --backend nccl without --device cuda (or in a
// build without NCCL), --lora-alpha or --lora-targets without
// --lora-rank, and a LoRA setting the model cannot take (model/lora.h's validate).
void checkOptions(const Options& o);

// The adapters the flags ask for (rank 0: none), the defaults filled in.
LoraConfig loraConfigOf(const Options& o);

// Where --resume reads: its own argument, else --save-dir (as a run restarted with the same
// command line resumes from its own checkpoints). Empty when not resuming.
std::string resumeDirectory(const Options& o);

// The device spec for makeDevice(): --device and --device-mem over the config's `configSpec`
// (zrt.device, zrt.host_device_memory). "cuda" without an ordinal is this rank's GPU on its node,
// as DeepSpeed's local rank picks one: cuda:<rankOnNode mod visibleGpus> (cuda:0 without any).
// Throws InvalidArgument for a device the model cannot run on.
std::string deviceSpecFor(const Options& o, const std::string& configSpec, int rankOnNode = 0,
                          int visibleGpus = 0);

// Whether rank 0 rewrites one progress line in place (with ETA) instead of printing a line per
// step. "auto": when stdout is a terminal and the process was not started by mpirun, because
// Open MPI hands every rank a pseudo-terminal whatever mpirun's own stdout is, so a rank cannot
// tell a terminal from a log file; scripts that know pass --progress on or off.
bool progressLine(const Options& o, bool stdoutIsTerminal, bool startedByMpirun);

}  // namespace zrt::trainer
