// Reading a DeepSpeed config: one function per section, each a list of typed reads (see
// config_section.h for the rules they share), then the checks that span sections.
#include "core/config/config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/config/batch_size.h"
#include "core/config/config_section.h"
#include "core/config/json_text.h"
#include "core/units.h"

namespace zrt {
namespace {

constexpr AutoValue kAuto = AutoValue::Accepted;

// Top-level keys DeepSpeed defines for features ZRT does not have (yet): accepted, listed in the
// start-up printout, otherwise left alone.
void ignoreTopLevel(ConfigSection& root) {
  root.ignore({"activation_checkpointing",
               "flops_profiler",
               "tensorboard",
               "wandb",
               "csv_monitor",
               "comet",
               "comms_logger",
               "zero_allow_untested_optimizer",
               "zero_force_ds_cpu_optimizer",
               "dump_state",
               "memory_breakdown",
               "sparse_gradients",
               "communication_data_type",
               "seq_parallel_communication_data_type",
               "fp32_allreduce",
               "disable_allgather",
               "gradient_allreduce_op",
               "checkpoint",
               "data_types",
               "autotuning",
               "amp",
               "torch_autocast",
               "compression_training",
               "quantize_training",
               "weight_quantization",
               "sparse_attention",
               "pipeline",
               "progressive_layer_drop",
               "curriculum_learning",
               "data_efficiency",
               "eigenvalue",
               "dataloader_drop_last",
               "nebula",
               "hybrid_engine",
               "compile",
               "timers",
               "tensor_parallel",
               "sequence_parallel_size",
               "vocabulary_size",
               "graph_harvesting",
               "use_data_before_expert_parallelism"});
}

void readOptimizer(ConfigSection& root, OptimizerConfig& o) {
  ConfigSection sec = root.section("optimizer");
  if (!sec.present()) return;
  o.present = true;
  if (!sec.has("type")) sec.fail("type", "missing; give one of Adam, AdamW, SGD");
  o.type = sec.readEnum("type", OptimizerType::AdamW,
                        {{"Adam", OptimizerType::Adam},
                         {"AdamW", OptimizerType::AdamW},
                         {"SGD", OptimizerType::SGD}});
  sec.ignore({"legacy_fusion"});
  ConfigSection params = sec.section("params");
  o.lr = params.readDouble("lr", o.lr, nonNegative(), kAuto);
  o.weight_decay = params.readDouble("weight_decay", o.weight_decay, nonNegative(), kAuto);
  if (params.has("max_grad_norm"))
    params.fail("max_grad_norm",
                "not an optimizer parameter here (DeepSpeed ignores it with a warning); use the "
                "top-level gradient_clipping");
  if (o.type == OptimizerType::SGD) {
    o.momentum = params.readDouble("momentum", o.momentum, nonNegative());
    o.dampening = params.readDouble("dampening", o.dampening, nonNegative());
    o.nesterov = params.readBool("nesterov", o.nesterov);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
      params.fail("nesterov", "Nesterov momentum needs momentum > 0 and dampening 0");
  } else {
    auto betas = params.readReals("betas", {o.beta1, o.beta2}, {0.0, 1.0, false}, kAuto);
    for (double b : betas)
      if (b >= 1.0) params.fail("betas", detail::cat("each beta must be below 1, got ", b));
    o.beta1 = betas[0];
    o.beta2 = betas[1];
    o.eps = params.readDouble("eps", o.eps, positive(), kAuto);
    // DeepSpeed's Adam is AdamW unless adam_w_mode is false; its AdamW is always AdamW.
    bool wMode = params.readBool("adam_w_mode", true);
    o.adam_w_mode = o.type == OptimizerType::AdamW || wMode;
    if (!params.readBool("bias_correction", true))
      params.fail("bias_correction", "ZRT's Adam always corrects bias; remove the key or set true");
    if (params.readBool("amsgrad", false))
      params.fail("amsgrad", "AMSGrad is not supported by ZRT; remove the key or set false");
    params.ignore({"torch_adam", "fp32_optimizer_states"});
  }
  params.finish();
  sec.finish();
}

// total_num_steps for the schedulers that decay: required, "auto" (stored as 0) leaves it to the
// trainer, and it may not end before the warmup does (DeepSpeed only warns).
void readTotalSteps(ConfigSection& params, SchedulerConfig& s, std::string_view typeName) {
  if (!params.has("total_num_steps"))
    params.fail("total_num_steps",
                detail::cat("missing; ", typeName, " needs the number of steps to decay over"));
  s.total_num_steps = params.readOptionalInt("total_num_steps", atLeast(1), kAuto).value_or(0);
  if (params.isAuto("total_num_steps"))
    params.note(params.pathOf("total_num_steps") + ": \"auto\" -> left to the trainer");
  else if (s.total_num_steps < s.warmup_num_steps)
    params.fail("total_num_steps", detail::cat("total_num_steps ", s.total_num_steps,
                                               " is below warmup_num_steps ", s.warmup_num_steps));
}

void readScheduler(ConfigSection& root, SchedulerConfig& s) {
  ConfigSection sec = root.section("scheduler");
  if (!sec.present()) return;
  if (!sec.has("type")) sec.fail("type", "missing; give WarmupLR, WarmupDecayLR or WarmupCosineLR");
  s.type = sec.readEnum("type", SchedulerType::WarmupLR,
                        {{"WarmupLR", SchedulerType::WarmupLR},
                         {"WarmupDecayLR", SchedulerType::WarmupDecayLR},
                         {"WarmupCosineLR", SchedulerType::WarmupCosineLR}});
  ConfigSection params = sec.section("params");
  if (s.type == SchedulerType::WarmupCosineLR) {
    // Ratios of the optimizer's lr; DeepSpeed's code has no "auto" for them and no lr keys.
    // warmup_num_steps must be positive (DeepSpeed raises ValueError for 0).
    s.warmup_min_ratio = params.readDouble("warmup_min_ratio", s.warmup_min_ratio, unitInterval());
    s.cos_min_ratio = params.readDouble("cos_min_ratio", s.cos_min_ratio, unitInterval());
    s.warmup_num_steps = params.readInt("warmup_num_steps", s.warmup_num_steps, atLeast(1), kAuto);
  } else {
    s.warmup_min_lr = params.readDouble("warmup_min_lr", s.warmup_min_lr, nonNegative(), kAuto);
    s.warmup_max_lr = params.readDouble("warmup_max_lr", s.warmup_max_lr, nonNegative(), kAuto);
    if (s.warmup_min_lr > s.warmup_max_lr)
      params.fail("warmup_min_lr", detail::cat("warmup_min_lr ", s.warmup_min_lr,
                                               " is above warmup_max_lr ", s.warmup_max_lr));
    s.warmup_num_steps = params.readInt("warmup_num_steps", s.warmup_num_steps, atLeast(0), kAuto);
  }
  s.warmup_type = params.readChoice("warmup_type", 0, {"log", "linear"}) == 0 ? "log" : "linear";
  params.ignore({"last_batch_iteration"});
  if (s.type == SchedulerType::WarmupDecayLR) readTotalSteps(params, s, "WarmupDecayLR");
  if (s.type == SchedulerType::WarmupCosineLR) readTotalSteps(params, s, "WarmupCosineLR");
  params.finish();
  sec.finish();
}

// fp16.enabled / bf16.enabled: a value in the file wins; "auto" or absent takes the caller's
// choice, and means off when the caller made none.
bool readEnabled(ConfigSection& sec, std::optional<bool> caller) {
  std::optional<bool> file = sec.readOptionalBool("enabled", kAuto);
  if (file) {
    if (caller && *caller != *file)
      sec.fail("enabled", detail::cat("the file says ", *file ? "true" : "false",
                                      " but the caller asks for ", *caller ? "true" : "false",
                                      "; write \"auto\" in the file to let the caller choose"));
    return *file;
  }
  bool on = caller.value_or(false);
  if (sec.isAuto("enabled") || caller)
    sec.note(detail::cat(sec.pathOf("enabled"), ": ", sec.isAuto("enabled") ? "\"auto\"" : "absent",
                         " -> ", on ? "true" : "false",
                         caller ? " (from the caller)" : " (off unless the caller turns it on)"));
  return on;
}

void readFp16(ConfigSection& root, Fp16Config& f, std::optional<bool> caller) {
  ConfigSection sec = root.section("fp16");
  f.enabled = readEnabled(sec, caller);
  f.loss_scale = sec.readDouble("loss_scale", f.loss_scale, nonNegative(), kAuto);
  f.initial_scale_power = static_cast<int>(
      sec.readInt("initial_scale_power", f.initial_scale_power, between(0, 64), kAuto));
  f.loss_scale_window = static_cast<int>(
      sec.readInt("loss_scale_window", f.loss_scale_window, between(1, 1 << 30), kAuto));
  f.hysteresis =
      static_cast<int>(sec.readInt("hysteresis", f.hysteresis, between(1, 1 << 30), kAuto));
  f.consecutive_hysteresis =
      sec.readBool("consecutive_hysteresis", f.consecutive_hysteresis, kAuto);
  f.min_loss_scale = sec.readDouble("min_loss_scale", f.min_loss_scale, positive(), kAuto);
  sec.ignore({"auto_cast", "fp16_master_weights_and_grads", "fused_mode"});
  sec.finish();
}

void readBf16(ConfigSection& root, Bf16Config& b, std::optional<bool> caller) {
  // "bfloat16" is DeepSpeed's old name for the section.
  if (root.has("bf16") && root.has("bfloat16"))
    root.fail("bfloat16", "give bf16 or its old name bfloat16, not both");
  ConfigSection sec = root.section(root.has("bfloat16") ? "bfloat16" : "bf16");
  b.enabled = readEnabled(sec, caller);
  sec.ignore({"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
              "bf16_optimizer_states"});
  sec.finish();
}

OffloadDevice readOffloadDevice(ConfigSection& sec) {
  return sec.readEnum(
      "device", OffloadDevice::None,
      {{"none", OffloadDevice::None}, {"cpu", OffloadDevice::Cpu}, {"nvme", OffloadDevice::Nvme}});
}

void requireNvmePath(ConfigSection& sec, OffloadDevice device,
                     const std::vector<std::string>& paths) {
  if (device == OffloadDevice::Nvme && paths.empty())
    sec.fail("nvme_path",
             "missing: device is \"nvme\", so give the directory to swap to (or a list of "
             "directories, one per drive)");
}

void readOffloadOptimizer(ConfigSection& zero, OffloadOptimizerConfig& o) {
  ConfigSection sec = zero.section("offload_optimizer");
  o.device = readOffloadDevice(sec);
  o.nvme_path = sec.readPaths("nvme_path");
  o.pin_memory = sec.readBool("pin_memory", o.pin_memory, kAuto);
  o.buffer_count =
      static_cast<int>(sec.readInt("buffer_count", o.buffer_count, between(1, 1 << 20), kAuto));
  o.pipeline_read = sec.readBool("pipeline_read", o.pipeline_read, kAuto);
  o.pipeline_write = sec.readBool("pipeline_write", o.pipeline_write, kAuto);
  o.fast_init = sec.readBool("fast_init", o.fast_init, kAuto);
  o.ratio = sec.readDouble("ratio", o.ratio, unitInterval(), kAuto);
  sec.ignore({"pipeline", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"});
  sec.finish();  // first, so a misspelt nvme_path is reported as such, with the suggestion
  requireNvmePath(sec, o.device, o.nvme_path);
}

void readOffloadParam(ConfigSection& zero, OffloadParamConfig& p) {
  ConfigSection sec = zero.section("offload_param");
  p.device = readOffloadDevice(sec);
  p.nvme_path = sec.readPaths("nvme_path");
  p.pin_memory = sec.readBool("pin_memory", p.pin_memory, kAuto);
  p.buffer_count =
      static_cast<int>(sec.readInt("buffer_count", p.buffer_count, between(1, 1 << 20), kAuto));
  p.buffer_size = sec.readInt("buffer_size", p.buffer_size, atLeast(1), kAuto);
  p.max_in_cpu = sec.readInt("max_in_cpu", p.max_in_cpu, atLeast(0), kAuto);
  sec.finish();
  requireNvmePath(sec, p.device, p.nvme_path);
}

// DeepSpeed's deprecated booleans: cpu_offload and cpu_offload_param stand for the offload
// sections with device "cpu"; giving both the old and the new form is an error there too.
void readDeprecatedOffload(ConfigSection& sec, const char* oldKey, const char* newKey,
                           OffloadDevice& device) {
  if (!sec.readBool(oldKey, false)) return;
  if (sec.has(newKey))
    sec.fail(oldKey, detail::cat("deprecated and replaced by ", newKey, "; give only ", newKey));
  device = OffloadDevice::Cpu;
  sec.note(detail::cat(sec.pathOf(oldKey), ": true -> ", sec.pathOf(newKey),
                       ".device \"cpu\" (deprecated form)"));
}

void readZero(ConfigSection& root, ZeroConfig& z) {
  ConfigSection sec = root.section("zero_optimization");
  if (sec.has("aio"))
    sec.fail("aio",
             "aio is a top-level section, not part of zero_optimization (some guides nest "
             "it by mistake, and DeepSpeed rejects it there too); move it to the top level");
  z.stage = static_cast<int>(sec.readInt("stage", z.stage, between(0, 3)));
  z.reduce_bucket_size = sec.readInt("reduce_bucket_size", z.reduce_bucket_size, atLeast(1), kAuto);
  z.allgather_bucket_size =
      sec.readInt("allgather_bucket_size", z.allgather_bucket_size, atLeast(1), kAuto);
  // DeepSpeed's code (not its docs) overlaps by default for stage 3 only.
  auto overlap = sec.readOptionalBool("overlap_comm", kAuto);
  z.overlap_comm = overlap.value_or(z.stage == 3);
  if (!overlap && sec.present())
    sec.note(detail::cat(sec.pathOf("overlap_comm"), ": ",
                         sec.isAuto("overlap_comm") ? "\"auto\"" : "absent", " -> ",
                         z.overlap_comm ? "true" : "false", " (DeepSpeed's default for stage ",
                         z.stage, ")"));
  z.contiguous_gradients = sec.readBool("contiguous_gradients", z.contiguous_gradients, kAuto);
  z.reduce_scatter = sec.readBool("reduce_scatter", z.reduce_scatter, kAuto);
  z.allgather_partitions = sec.readBool("allgather_partitions", z.allgather_partitions, kAuto);
  z.round_robin_gradients = sec.readBool("round_robin_gradients", z.round_robin_gradients, kAuto);
  z.sub_group_size = sec.readInt("sub_group_size", z.sub_group_size, atLeast(1), kAuto);
  z.stage3_prefetch_bucket_size =
      sec.readInt({"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
                  z.stage3_prefetch_bucket_size, atLeast(0), kAuto);
  z.stage3_param_persistence_threshold =
      sec.readInt({"stage3_param_persistence_threshold", "param_persistence_threshold"},
                  z.stage3_param_persistence_threshold, atLeast(0), kAuto);
  z.stage3_max_live_parameters = sec.readInt({"stage3_max_live_parameters", "max_live_parameters"},
                                             z.stage3_max_live_parameters, atLeast(0), kAuto);
  z.stage3_max_reuse_distance = sec.readInt({"stage3_max_reuse_distance", "max_reuse_distance"},
                                            z.stage3_max_reuse_distance, atLeast(0), kAuto);
  readOffloadOptimizer(sec, z.offload_optimizer);
  readOffloadParam(sec, z.offload_param);
  readDeprecatedOffload(sec, "cpu_offload", "offload_optimizer", z.offload_optimizer.device);
  readDeprecatedOffload(sec, "cpu_offload_param", "offload_param", z.offload_param.device);
  sec.ignore({"load_from_fp32_weights",
              "elastic_checkpoint",
              "ignore_unused_parameters",
              "legacy_stage1",
              "grad_hooks",
              "stage3_gather_16bit_weights_on_model_save",
              "gather_16bit_weights_on_model_save",
              "stage3_gather_fp16_weights_on_model_save",
              "stage3_model_persistence_threshold",
              "model_persistence_threshold",
              "stage3_module_granularity_threshold",
              "module_granularity_threshold",
              "stage3_use_all_reduce_for_fetch_params",
              "use_all_reduce_for_fetch_params",
              "use_multi_rank_bucket_allreduce",
              "memory_efficient_linear",
              "override_module_apply",
              "pipeline_loading_checkpoint",
              "log_trace_cache_warnings",
              "zero_hpz_partition_size",
              "zero_quantized_weights",
              "zero_quantized_nontrainable_weights",
              "zero_quantized_gradients",
              "zeropp_loco_param",
              "mics_shard_size",
              "mics_hierarchical_params_gather",
              "cpu_offload_use_pin_memory"});
  sec.finish();

  // Offload placements that only some stages support.
  if (auto breach = offloadRuleBreach(z.stage, z.offload_optimizer.device, z.offload_param.device))
    sec.section(breach->section).fail("device", breach->problem);
  ConfigSection optim = sec.section("offload_optimizer");
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3)
    optim.fail("ratio", "partial optimizer offload (ratio below 1) needs ZeRO stage 3");
}

void readAio(ConfigSection& root, AioConfig& a) {
  ConfigSection sec = root.section("aio");
  a.block_size = static_cast<std::int64_t>(sec.readBytes(
      "block_size", static_cast<std::uint64_t>(a.block_size), between(4096, 1ll << 30)));
  if (a.block_size % 4096 != 0)
    sec.fail("block_size", detail::cat("value ", a.block_size,
                                       " is not a multiple of 4096 (direct I/O moves whole 4 KiB "
                                       "blocks)"));
  a.queue_depth = static_cast<int>(sec.readInt("queue_depth", a.queue_depth, between(1, 32768)));
  // DeepSpeed's docs and its NVMe tuner print thread_count (older) and num_threads.
  a.intra_op_parallelism =
      static_cast<int>(sec.readInt({"intra_op_parallelism", "thread_count", "num_threads"},
                                   a.intra_op_parallelism, between(1, 1024)));
  a.single_submit = sec.readBool("single_submit", a.single_submit);
  a.overlap_events = sec.readBool("overlap_events", a.overlap_events);
  a.use_gds = sec.readBool("use_gds", a.use_gds);
  sec.finish();
}

void readZrt(ConfigSection& root, ZrtConfig& z) {
  ConfigSection sec = root.section("zrt");
  std::string device = sec.readString("device", z.device);
  std::string kind = device.substr(0, device.find(':'));
  std::string arg =
      device.find(':') == std::string::npos ? "" : device.substr(device.find(':') + 1);
  std::uint64_t capacity = 0;
  const bool hostKind = kind == "host" || kind == "host-strict";
  if (hostKind) {
    if (!arg.empty()) {
      try {
        capacity = parseBytes(arg, "host device capacity");
      } catch (const InvalidArgument&) {
        sec.fail("device", "bad capacity '" + arg + "' in \"" + device +
                               "\": expected " + kind + ":<bytes> such as " + kind + ":16G");
      }
    }
  } else if (kind == "cuda") {
    if (!arg.empty() &&
        (arg.find_first_not_of("0123456789") != std::string::npos || arg.size() > 4))
      sec.fail("device", "bad ordinal in \"" + device + "\": expected cuda or cuda:<n>");
  } else {
    sec.fail("device",
             "unknown device \"" + device +
                 "\": expected host, host:<bytes>, host-strict, host-strict:<bytes>, cuda or "
                 "cuda:<n>");
  }
  // 0 (the default) leaves the capacity to ZRT_HOST_DEVICE_MEMORY or makeDevice()'s default.
  std::uint64_t memory = sec.readBytes("host_device_memory", 0, atLeast(0));
  if (memory != 0 && memory < (1u << 20))
    sec.fail("host_device_memory", detail::cat(memory,
                                               " bytes is too small for a device; give at "
                                               "least 1M, or 0 for the default"));
  if (memory != 0 && !hostKind)
    sec.fail("host_device_memory",
             "applies to the host device only, but device is \"" + device + "\"");
  if (memory != 0 && capacity != 0 && memory != capacity)
    sec.fail("host_device_memory", detail::cat(memory, " bytes conflicts with device \"", device,
                                               "\" (", capacity, " bytes); give the size once"));
  z.device = hostKind ? kind : device;
  z.host_device_memory = memory != 0 ? memory : capacity;
  z.comm_timeout_s = sec.readDouble("comm_timeout_s", z.comm_timeout_s, positive());
  z.divergence_timeout_s = sec.readDouble("divergence_timeout_s", z.divergence_timeout_s, nonNegative());
  z.max_skipped_steps =
      static_cast<int>(sec.readInt("max_skipped_steps", z.max_skipped_steps, between(0, 1'000'000'000)));
  z.metrics_address = sec.readString("metrics_address", z.metrics_address);
  if (z.metrics_address.empty()) sec.fail("metrics_address", "is empty: give an IP address such as 127.0.0.1");
  z.metrics_port = static_cast<int>(sec.readInt("metrics_port", z.metrics_port, between(0, 65535)));
  sec.finish();
}

BatchSetting batchSetting(ConfigSection& root, const char* key,
                          std::optional<std::int64_t> caller) {
  if (caller && *caller < 1)
    root.fail(key, detail::cat("the caller's value ", *caller, " must be >= 1"));
  BatchSetting s;
  s.file = root.readOptionalInt(key, atLeast(1), kAuto);
  s.fileAuto = root.isAuto(key);
  s.caller = caller;
  return s;
}

void readTopLevel(ConfigSection& root, Config& c, const ConfigOverrides& overrides) {
  BatchRequest request;
  request.train = batchSetting(root, "train_batch_size", overrides.train_batch_size);
  request.micro = batchSetting(root, "train_micro_batch_size_per_gpu",
                               overrides.train_micro_batch_size_per_gpu);
  request.accum =
      batchSetting(root, "gradient_accumulation_steps", overrides.gradient_accumulation_steps);
  BatchSizes batch = resolveBatchSizes(request, c.world_size, c.source);
  c.train_batch_size = batch.train;
  c.train_micro_batch_size_per_gpu = batch.micro;
  c.gradient_accumulation_steps = batch.accum;
  for (auto& note : batch.notes) root.note(note);

  c.gradient_clipping =
      root.readDouble("gradient_clipping", c.gradient_clipping, nonNegative(), kAuto);
  c.steps_per_print = root.readInt("steps_per_print", c.steps_per_print, atLeast(0));
  c.wall_clock_breakdown = root.readBool("wall_clock_breakdown", c.wall_clock_breakdown);
  c.prescale_gradients = root.readBool("prescale_gradients", c.prescale_gradients);
  c.gradient_predivide_factor =
      root.readDouble("gradient_predivide_factor", c.gradient_predivide_factor, positive());
  root.noteNotActedOn({"steps_per_print", "wall_clock_breakdown"});

  readOptimizer(root, c.optimizer);
  readScheduler(root, c.scheduler);
  readFp16(root, c.fp16, overrides.fp16);
  readBf16(root, c.bf16, overrides.bf16);
  if (c.fp16.enabled && c.bf16.enabled)
    root.fail(root.has("bfloat16") ? "bfloat16" : "bf16",
              "fp16 and bf16 cannot both be enabled (as in DeepSpeed); pick one");
  readZero(root, c.zero_optimization);
  readAio(root, c.aio);
  readZrt(root, c.zrt);

  // Elastic training rewrites the batch sizes; ZRT does not do it, so refuse rather than train
  // with batch sizes the user did not expect.
  ConfigSection elastic = root.section("elasticity");
  if (elastic.present() && elastic.readBool("enabled", false))
    elastic.fail("enabled", "elastic training is not supported by ZRT; set false or remove it");
  root.noteNotActedOn({"elasticity"});
  ignoreTopLevel(root);
  root.finish();
}

}  // namespace

std::optional<OffloadRuleBreach> offloadRuleBreach(int stage, OffloadDevice optimizer,
                                                   OffloadDevice param) {
  if (param != OffloadDevice::None && stage != 3)
    return OffloadRuleBreach{
        "offload_param", detail::cat("parameter offload needs ZeRO stage 3 (stage is ", stage, ")")};
  if (optimizer != OffloadDevice::None && stage < 1)
    return OffloadRuleBreach{"offload_optimizer",
                             detail::cat("optimizer offload needs ZeRO stage 1, 2 or 3 (stage is ",
                                         stage, ")")};
  if (optimizer == OffloadDevice::Nvme && stage != 3)
    return OffloadRuleBreach{
        "offload_optimizer",
        detail::cat("NVMe optimizer offload needs ZeRO stage 3 (stage is ", stage,
                    "; DeepSpeed would quietly use the CPU instead)")};
  return std::nullopt;
}

Config parseConfig(const std::string& text, const std::string& source, int worldSize,
                   const ConfigOverrides& overrides) {
  nlohmann::json json = parseJsonText(text, source);
  if (!json.is_object())
    throw ConfigError(
        source, "",
        "the top level must be a JSON object ({...}), got " + std::string(json.type_name()));
  Config config;
  config.source = source;
  config.world_size = worldSize;
  if (worldSize < 1)
    throw ConfigError(source, "", detail::cat("world size ", worldSize, " must be >= 1"));
  ConfigLog log;
  log.source = source;
  ConfigSection root(&json, "", log);
  readTopLevel(root, config, overrides);
  config.resolution_notes = std::move(log.notes);
  config.ignored_keys = std::move(log.ignored);
  return config;
}

Config loadConfig(const std::filesystem::path& file, int worldSize,
                  const ConfigOverrides& overrides) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ConfigError(file.string(), "", std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw ConfigError(file.string(), "", std::string("cannot read: ") + std::strerror(errno));
  return parseConfig(text.str(), file.string(), worldSize, overrides);
}

}  // namespace zrt
