// Printing a resolved config: as JSON that loads back to the same config (toJson), as the
// start-up summary (describe), and as the device spec and training dtype it asks for
// (deviceSpec, trainingPrecision).
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/units.h"

namespace zrt {

std::string_view nameOf(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::None:
      return "none";
    case OffloadDevice::Cpu:
      return "cpu";
    case OffloadDevice::Nvme:
      return "nvme";
  }
  return "?";
}

std::string_view nameOf(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam:
      return "Adam";
    case OptimizerType::AdamW:
      return "AdamW";
    case OptimizerType::SGD:
      return "SGD";
  }
  return "?";
}

std::string_view nameOf(SchedulerType type) {
  switch (type) {
    case SchedulerType::None:
      return "none";
    case SchedulerType::WarmupLR:
      return "WarmupLR";
    case SchedulerType::WarmupDecayLR:
      return "WarmupDecayLR";
    case SchedulerType::WarmupCosineLR:
      return "WarmupCosineLR";
  }
  return "?";
}

namespace {

// nvme_path as DeepSpeed writes it: null, one string, or (ZRT's extension) a list.
nlohmann::json pathsJson(const std::vector<std::string>& paths) {
  if (paths.empty()) return nullptr;
  if (paths.size() == 1) return paths.front();
  return paths;
}

std::string pathsText(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) out += (out.empty() ? "" : ", ") + p;
  return out;
}

const char* onOff(bool b) { return b ? "true" : "false"; }

}  // namespace

nlohmann::json toJson(const Config& c) {
  nlohmann::json j;
  j["train_batch_size"] = c.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["gradient_clipping"] = c.gradient_clipping;
  j["steps_per_print"] = c.steps_per_print;
  j["wall_clock_breakdown"] = c.wall_clock_breakdown;
  j["prescale_gradients"] = c.prescale_gradients;
  j["gradient_predivide_factor"] = c.gradient_predivide_factor;

  if (c.optimizer.present) {
    const auto& o = c.optimizer;
    nlohmann::json params = {{"lr", o.lr}, {"weight_decay", o.weight_decay}};
    if (o.type == OptimizerType::SGD) {
      params["momentum"] = o.momentum;
      params["dampening"] = o.dampening;
      params["nesterov"] = o.nesterov;
    } else {
      params["betas"] = {o.beta1, o.beta2};
      params["eps"] = o.eps;
      params["adam_w_mode"] = o.adam_w_mode;
    }
    j["optimizer"] = {{"type", nameOf(o.type)}, {"params", params}};
  }
  if (c.scheduler.type != SchedulerType::None) {
    const auto& s = c.scheduler;
    nlohmann::json params = {{"warmup_num_steps", s.warmup_num_steps},
                             {"warmup_type", s.warmup_type}};
    if (s.type == SchedulerType::WarmupCosineLR) {
      params["warmup_min_ratio"] = s.warmup_min_ratio;
      params["cos_min_ratio"] = s.cos_min_ratio;
    } else {
      params["warmup_min_lr"] = s.warmup_min_lr;
      params["warmup_max_lr"] = s.warmup_max_lr;
    }
    if (s.type != SchedulerType::WarmupLR)
      params["total_num_steps"] =
          s.total_num_steps > 0 ? nlohmann::json(s.total_num_steps) : nlohmann::json("auto");
    j["scheduler"] = {{"type", nameOf(s.type)}, {"params", params}};
  }
  const auto& f = c.fp16;
  j["fp16"] = {{"enabled", f.enabled},
               {"loss_scale", f.loss_scale},
               {"initial_scale_power", f.initial_scale_power},
               {"loss_scale_window", f.loss_scale_window},
               {"hysteresis", f.hysteresis},
               {"consecutive_hysteresis", f.consecutive_hysteresis},
               {"min_loss_scale", f.min_loss_scale}};
  j["bf16"] = {{"enabled", c.bf16.enabled}};

  const auto& z = c.zero_optimization;
  const auto& oo = z.offload_optimizer;
  const auto& op = z.offload_param;
  j["zero_optimization"] = {
      {"stage", z.stage},
      {"reduce_bucket_size", z.reduce_bucket_size},
      {"allgather_bucket_size", z.allgather_bucket_size},
      {"overlap_comm", z.overlap_comm},
      {"contiguous_gradients", z.contiguous_gradients},
      {"reduce_scatter", z.reduce_scatter},
      {"allgather_partitions", z.allgather_partitions},
      {"round_robin_gradients", z.round_robin_gradients},
      {"sub_group_size", z.sub_group_size},
      {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
      {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
      {"stage3_max_live_parameters", z.stage3_max_live_parameters},
      {"stage3_max_reuse_distance", z.stage3_max_reuse_distance},
      {"offload_optimizer",
       {{"device", nameOf(oo.device)},
        {"nvme_path", pathsJson(oo.nvme_path)},
        {"pin_memory", oo.pin_memory},
        {"buffer_count", oo.buffer_count},
        {"pipeline_read", oo.pipeline_read},
        {"pipeline_write", oo.pipeline_write},
        {"fast_init", oo.fast_init},
        {"ratio", oo.ratio}}},
      {"offload_param",
       {{"device", nameOf(op.device)},
        {"nvme_path", pathsJson(op.nvme_path)},
        {"pin_memory", op.pin_memory},
        {"buffer_count", op.buffer_count},
        {"buffer_size", op.buffer_size},
        {"max_in_cpu", op.max_in_cpu}}}};

  const auto& a = c.aio;
  j["aio"] = {{"block_size", a.block_size},
              {"queue_depth", a.queue_depth},
              {"intra_op_parallelism", a.intra_op_parallelism},
              {"single_submit", a.single_submit},
              {"overlap_events", a.overlap_events},
              {"use_gds", a.use_gds}};
  j["zrt"] = {{"device", c.zrt.device},
              {"host_device_memory", c.zrt.host_device_memory},
              {"comm_timeout_s", c.zrt.comm_timeout_s},
              {"divergence_timeout_s", c.zrt.divergence_timeout_s},
              {"max_skipped_steps", c.zrt.max_skipped_steps},
              {"metrics_address", c.zrt.metrics_address},
              {"metrics_port", c.zrt.metrics_port}};
  return j;
}

DType trainingPrecision(const Config& c) {
  return c.bf16.enabled ? DType::BF16 : c.fp16.enabled ? DType::F16 : DType::F32;
}

std::string deviceSpec(const Config& c) {
  if ((c.zrt.device == "host" || c.zrt.device == "host-strict") && c.zrt.host_device_memory > 0)
    return c.zrt.device + ":" + std::to_string(c.zrt.host_device_memory);
  return c.zrt.device;
}

std::string describe(const Config& c) {
  std::ostringstream out;
  out << "ZRT config from " << c.source << " (world size " << c.world_size << ")\n";
  out << "  batch       train_batch_size " << c.train_batch_size << " = micro-batch "
      << c.train_micro_batch_size_per_gpu << " * accumulation " << c.gradient_accumulation_steps
      << " * world size " << c.world_size << "\n";

  const auto& o = c.optimizer;
  out << "  optimizer   ";
  if (!o.present) {
    out << "none in the file (the caller supplies one)\n";
  } else if (o.type == OptimizerType::SGD) {
    out << "SGD lr " << o.lr << " momentum " << o.momentum << " dampening " << o.dampening
        << " nesterov " << onOff(o.nesterov) << " weight_decay " << o.weight_decay << "\n";
  } else {
    out << nameOf(o.type) << (o.adam_w_mode ? " (decoupled weight decay)" : " (L2 weight decay)")
        << " lr " << o.lr << " betas (" << o.beta1 << ", " << o.beta2 << ") eps " << o.eps
        << " weight_decay " << o.weight_decay << "\n";
  }
  const auto& s = c.scheduler;
  out << "  scheduler   ";
  if (s.type == SchedulerType::None) {
    out << "none\n";
  } else {
    if (s.type == SchedulerType::WarmupCosineLR)
      out << nameOf(s.type) << " lr x " << s.warmup_min_ratio << " -> x 1";
    else
      out << nameOf(s.type) << " lr " << s.warmup_min_lr << " -> " << s.warmup_max_lr;
    out << " over " << s.warmup_num_steps << " steps (" << s.warmup_type << ")";
    if (s.type != SchedulerType::WarmupLR) {
      if (s.type == SchedulerType::WarmupCosineLR)
        out << ", cosine to lr x " << s.cos_min_ratio << " by step ";
      else
        out << ", decaying to " << s.warmup_min_lr << " by step ";
      if (s.total_num_steps > 0)
        out << s.total_num_steps;
      else
        out << "(set by the trainer)";
    }
    out << "\n";
  }
  out << "  precision   ";
  if (c.fp16.enabled) {
    out << "fp16, ";
    if (c.fp16.loss_scale > 0)
      out << "static loss scale " << c.fp16.loss_scale;
    else
      out << "dynamic loss scale from 2^" << c.fp16.initial_scale_power << " (window "
          << c.fp16.loss_scale_window << ", hysteresis " << c.fp16.hysteresis << ", min "
          << c.fp16.min_loss_scale << ")";
  } else if (c.bf16.enabled) {
    out << "bf16";
  } else {
    out << "fp32";
  }
  out << "; gradient clipping ";
  if (c.gradient_clipping > 0)
    out << c.gradient_clipping << "\n";
  else
    out << "off\n";

  const auto& z = c.zero_optimization;
  out << "  zero        stage " << z.stage << ": reduce_bucket_size " << z.reduce_bucket_size
      << ", allgather_bucket_size " << z.allgather_bucket_size << ", overlap_comm "
      << onOff(z.overlap_comm) << ", contiguous_gradients " << onOff(z.contiguous_gradients)
      << ", reduce_scatter " << onOff(z.reduce_scatter) << "\n";
  if (z.stage == 3)
    out << "  stage 3     prefetch " << z.stage3_prefetch_bucket_size << ", persistence threshold "
        << z.stage3_param_persistence_threshold << ", max live " << z.stage3_max_live_parameters
        << ", max reuse distance " << z.stage3_max_reuse_distance << ", sub_group_size "
        << z.sub_group_size << "\n";
  const auto& oo = z.offload_optimizer;
  const auto& op = z.offload_param;
  out << "  offload     optimizer state: " << nameOf(oo.device);
  if (oo.device == OffloadDevice::Nvme) out << " [" << pathsText(oo.nvme_path) << "]";
  if (oo.device != OffloadDevice::None)
    out << " (pin_memory " << onOff(oo.pin_memory) << ", buffer_count " << oo.buffer_count << ")";
  out << "; parameters: " << nameOf(op.device);
  if (op.device == OffloadDevice::Nvme) out << " [" << pathsText(op.nvme_path) << "]";
  if (op.device != OffloadDevice::None)
    out << " (pin_memory " << onOff(op.pin_memory) << ", buffer_count " << op.buffer_count
        << ", buffer_size " << op.buffer_size << ")";
  out << "\n";
  const auto& a = c.aio;
  out << "  aio         block_size " << formatBytes(static_cast<std::uint64_t>(a.block_size))
      << ", queue_depth " << a.queue_depth << ", intra_op_parallelism " << a.intra_op_parallelism
      << ", single_submit " << onOff(a.single_submit) << ", overlap_events "
      << onOff(a.overlap_events) << "\n";
  out << "  zrt         device " << deviceSpec(c);
  if (c.zrt.host_device_memory > 0) out << " (" << formatBytes(c.zrt.host_device_memory) << ")";
  out << ", comm_timeout_s " << c.zrt.comm_timeout_s << ", divergence_timeout_s "
      << c.zrt.divergence_timeout_s << ", max_skipped_steps " << c.zrt.max_skipped_steps;
  if (c.zrt.metrics_port != 0) out << ", metrics " << c.zrt.metrics_address << ":" << c.zrt.metrics_port;
  out << "\n";

  if (!c.resolution_notes.empty()) {
    out << "  resolved:\n";
    for (const auto& note : c.resolution_notes) out << "    " << note << "\n";
  }
  if (!c.ignored_keys.empty()) {
    out << "  accepted, not acted on by ZRT:";
    for (const auto& key : c.ignored_keys) out << " " << key;
    out << "\n";
  }
  return out.str();
}

}  // namespace zrt
