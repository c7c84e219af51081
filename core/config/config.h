// The run's configuration, read from DeepSpeed's JSON format (docs/config.md). Plain data with
// DeepSpeed's defaults filled in (its code's defaults where its docs disagree); loadConfig()
// reads, validates and resolves a file, and every tool and the Engine use it, so a config
// behaves the same everywhere. Every problem is a ConfigError naming the file and JSON path.
// Thread-safety: plain values; read-only after loading. Loading is reentrant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/config/config_error.h"
#include "core/dtype.h"

namespace zrt {

enum class OffloadDevice { None, Cpu, Nvme };
enum class OptimizerType { Adam, AdamW, SGD };
enum class SchedulerType { None, WarmupLR, WarmupDecayLR, WarmupCosineLR };

struct OptimizerConfig {
  bool present = false;  // false: no "optimizer" section (the caller supplies one).
  OptimizerType type = OptimizerType::AdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;  // DeepSpeed's Adam with adam_w_mode true is AdamW.
  double momentum = 0.0;    // SGD
  double dampening = 0.0;   // SGD
  bool nesterov = false;    // SGD
};

// DeepSpeed's three warmup schedulers (runtime/lr_schedule.h turns this into learning rates).
// WarmupLR and WarmupDecayLR work in absolute learning rates (warmup_min_lr, warmup_max_lr);
// WarmupCosineLR in ratios of the optimizer's lr (warmup_min_ratio, cos_min_ratio) and has no
// lr keys of its own.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::None;
  double warmup_min_lr = 0.0;   // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;  // WarmupLR, WarmupDecayLR
  std::int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";   // "log" or "linear"
  std::int64_t total_num_steps = 0;  // WarmupDecayLR, WarmupCosineLR (required there); 0:
                                     // "auto", the trainer supplies it
  double warmup_min_ratio = 0.0;     // WarmupCosineLR: the warmup's first ratio of the lr
  double cos_min_ratio = 1e-4;       // WarmupCosineLR: the ratio the cosine ends at
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0: dynamic loss scaling
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;  // DeepSpeed's code takes an integer; ZRT also takes fractions
};

struct Bf16Config {
  bool enabled = false;
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::None;
  std::vector<std::string> nvme_path;  // One directory per drive; striped over when several.
  bool pin_memory = false;
  int buffer_count = 4;
  // On unless set false (DeepSpeed's default is false): ZRT's swapper overlaps the NVMe reads
  // and writes with the optimizer's arithmetic.
  bool pipeline_read = true;
  bool pipeline_write = true;
  bool fast_init = false;
  double ratio = 1.0;
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::None;
  std::vector<std::string> nvme_path;
  bool pin_memory = false;
  int buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;
  std::int64_t max_in_cpu = 1'000'000'000;
};

struct ZeroConfig {
  int stage = 0;
  std::int64_t reduce_bucket_size = 500'000'000;     // elements
  std::int64_t allgather_bucket_size = 500'000'000;  // elements
  bool overlap_comm = false;  // DeepSpeed's code: true for stage 3 when absent, else false.
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  bool round_robin_gradients = false;
  std::int64_t sub_group_size = 1'000'000'000;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t stage3_param_persistence_threshold = 100'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
};

struct AioConfig {
  std::int64_t block_size = 1'048'576;  // bytes
  int queue_depth = 8;
  int intra_op_parallelism = 1;  // aliases: thread_count, num_threads
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

// ZRT's own section ("zrt"), for what DeepSpeed has no key for.
struct ZrtConfig {
  std::string device = "host";  // "host", "host-strict" (capacity below), "cuda", "cuda:<n>"
  std::uint64_t host_device_memory = 0;  // 0: ZRT_HOST_DEVICE_MEMORY or the default
  double comm_timeout_s = 600.0;         // a collective not done by then reports and aborts
  // A peer in no ZRT call for longer while a collective waits for it: the ranks diverged (the
  // job ends, naming each rank's call); 0 turns the check off.
  double divergence_timeout_s = 6.0;
  // fp32 and bf16 (no loss scale): optimizer steps in a row skipped for inf/NaN gradients after
  // which step() raises; 0: never.
  int max_skipped_steps = 10;
  // Rank 0's Prometheus endpoint (runtime/metrics/metrics_server.h): 0 = off.
  std::string metrics_address = "127.0.0.1";
  int metrics_port = 0;
};

struct Config {
  std::string source;  // File name (or "<string>") for error messages.

  // Resolved batch sizes: train_batch_size = micro * accumulation * world_size.
  std::int64_t train_batch_size = 1;
  std::int64_t train_micro_batch_size_per_gpu = 1;
  std::int64_t gradient_accumulation_steps = 1;
  int world_size = 1;

  double gradient_clipping = 0.0;
  std::int64_t steps_per_print = 0;  // 0: never (DeepSpeed's code default None; its docs say 10)
  bool wall_clock_breakdown = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;

  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  ZeroConfig zero_optimization;
  AioConfig aio;
  ZrtConfig zrt;

  // How each "auto" or absent batch value was resolved, for the start-up printout.
  std::vector<std::string> resolution_notes;
  // JSON paths of keys DeepSpeed defines that were given but that ZRT does not act on.
  std::vector<std::string> ignored_keys;
};

// Values the caller (a trainer's flags) supplies for keys the file leaves "auto" or absent.
struct ConfigOverrides {
  std::optional<std::int64_t> train_batch_size;
  std::optional<std::int64_t> train_micro_batch_size_per_gpu;
  std::optional<std::int64_t> gradient_accumulation_steps;
  std::optional<bool> fp16;  // turns fp16 on where the file says "auto"
  std::optional<bool> bf16;
};

// Reads, validates and resolves a config file. Throws ConfigError (an InvalidArgument) naming
// the file, the JSON path and the problem (with line and column for malformed JSON, and the
// nearest known key for a misspelt one).
Config loadConfig(const std::filesystem::path& file, int worldSize,
                  const ConfigOverrides& overrides = {});
// The same from JSON text already in memory; `source` names it in errors.
Config parseConfig(const std::string& text, const std::string& source, int worldSize,
                   const ConfigOverrides& overrides = {});

// The resolved config as JSON, every default filled in (what zrt-config prints).
nlohmann::json toJson(const Config& config);
// A human-readable start-up printout: resolved values, how "auto" values were resolved, and the
// keys accepted but not acted on.
std::string describe(const Config& config);

// DeepSpeed's placement rules, which ZRT keeps: offload_param needs ZeRO stage 3 (only stage 3
// shards parameters); offload_optimizer needs stage 1, 2 or 3 (the offloaded optimizer works on
// a shard), and stage 3 for nvme (ZeRO-Infinity). The config reader and the model-state
// allocator (partition/stage_rules.h) both check them here.
struct OffloadRuleBreach {
  std::string section;  // "offload_param" or "offload_optimizer"
  std::string problem;  // in words, with the stage
};
// The first rule the settings break, or nullopt.
std::optional<OffloadRuleBreach> offloadRuleBreach(int stage, OffloadDevice optimizer,
                                                   OffloadDevice param);

// The device spec for makeDevice() (core/device.h) the config asks for: "host:<bytes>" when
// zrt.host_device_memory is set ("host-strict:<bytes>" for the strict host device), else
// zrt.device ("host", "host-strict", "cuda", "cuda:<n>").
std::string deviceSpec(const Config& config);

// The training dtype of parameters and gradients: bf16 or fp16 when enabled, else fp32.
DType trainingPrecision(const Config& config);

// Names as they appear in config files ("nvme", "AdamW", "WarmupLR", "none").
std::string_view nameOf(OffloadDevice device);
std::string_view nameOf(OptimizerType type);
std::string_view nameOf(SchedulerType type);

}  // namespace zrt
