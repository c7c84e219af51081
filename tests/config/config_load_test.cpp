// Loading good configs: the shipped ones unchanged, DeepSpeed's defaults, "auto", aliases,
// numbers written as strings, the zrt section, and printing (toJson loads back to the same).
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/config/config_test_util.h"

using namespace zrt;
using zrt::test::contains;
using zrt::test::shippedConfig;

namespace {
Config parse(const std::string& text, int world = 1, const ConfigOverrides& o = {}) {
  return parseConfig(text, "test.json", world, o);
}
}  // namespace

TEST_CASE("the ZeRO-2 config users commonly write loads unchanged") {
  for (int world : {1, 2, 4, 8}) {
    Config c = loadConfig(shippedConfig("zero2.json"), world);
    CHECK(c.source == shippedConfig("zero2.json"));
    CHECK(c.zero_optimization.stage == 2);
    CHECK(c.zero_optimization.allgather_partitions);
    CHECK(c.zero_optimization.allgather_bucket_size == 200'000'000);
    CHECK(c.zero_optimization.overlap_comm);
    CHECK(c.zero_optimization.reduce_scatter);
    CHECK(c.zero_optimization.reduce_bucket_size == 200'000'000);
    CHECK(c.zero_optimization.contiguous_gradients);
    // "auto" with no caller: fp16 off, micro-batch 1, no accumulation.
    CHECK_FALSE(c.fp16.enabled);
    CHECK(c.train_micro_batch_size_per_gpu == 1);
    CHECK(c.gradient_accumulation_steps == 1);
    CHECK(c.train_batch_size == world);
    CHECK(c.world_size == world);
    CHECK(c.ignored_keys.empty());
  }
}

TEST_CASE("the caller fills the ZeRO-2 config's auto values") {
  ConfigOverrides o;
  o.train_micro_batch_size_per_gpu = 4;
  o.gradient_accumulation_steps = 2;
  o.fp16 = true;
  Config c = loadConfig(shippedConfig("zero2.json"), 4, o);
  CHECK(c.fp16.enabled);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 2);
  CHECK(c.train_batch_size == 32);
  std::string notes;
  for (const auto& n : c.resolution_notes) notes += n + "\n";
  CHECK(contains(notes, "fp16.enabled: \"auto\" -> true (from the caller)"));
  CHECK(contains(notes, "train_micro_batch_size_per_gpu: \"auto\" -> 4 (from the caller)"));
  CHECK(contains(notes, "train_batch_size: \"auto\" -> 32"));
}

TEST_CASE("DeepSpeed's documented ZeRO-3 NVMe example loads unchanged") {
  Config c = loadConfig(shippedConfig("zero3-nvme.json"), 2);
  const auto& z = c.zero_optimization;
  CHECK(z.stage == 3);
  CHECK(z.offload_optimizer.device == OffloadDevice::Nvme);
  CHECK(z.offload_optimizer.nvme_path == std::vector<std::string>{"/nvme_data"});
  CHECK(z.offload_param.device == OffloadDevice::Nvme);
  CHECK(z.offload_param.nvme_path == std::vector<std::string>{"/nvme_data"});
  // Absent keys take DeepSpeed's code defaults for stage 3.
  CHECK(z.overlap_comm);
  CHECK(z.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(z.offload_optimizer.buffer_count == 4);
  CHECK(z.offload_param.buffer_count == 5);
  CHECK(c.train_batch_size == 2);
}

TEST_CASE("every config shipped under configs/ loads, and prints what it loaded") {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(ZRT_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().string());
    Config c = loadConfig(entry.path(), 2);
    CHECK(c.train_batch_size ==
          c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * 2);
    CHECK(contains(describe(c), entry.path().string()));
    ++count;
  }
  CHECK(count >= 2);
}

TEST_CASE("absent keys take DeepSpeed's code defaults") {
  // Expected values copied from DeepSpeed's source (runtime/zero/config.py, offload_config.py,
  // precision_config.py, constants.py, swap_tensor/constants.py), not from config.h.
  Config c = parse("{}");
  CHECK(c.train_micro_batch_size_per_gpu == 1);
  CHECK(c.gradient_accumulation_steps == 1);
  CHECK(c.gradient_clipping == 0.0);  // GRADIENT_CLIPPING_DEFAULT (the docs say 1.0)
  CHECK(c.prescale_gradients == false);
  CHECK(c.gradient_predivide_factor == 1.0);
  CHECK_FALSE(c.optimizer.present);
  CHECK(c.scheduler.type == SchedulerType::None);
  CHECK_FALSE(c.fp16.enabled);
  CHECK(c.fp16.loss_scale == 0.0);
  CHECK(c.fp16.initial_scale_power == 16);
  CHECK(c.fp16.loss_scale_window == 1000);
  CHECK(c.fp16.hysteresis == 2);
  CHECK_FALSE(c.fp16.consecutive_hysteresis);
  CHECK(c.fp16.min_loss_scale == 1.0);
  CHECK_FALSE(c.bf16.enabled);
  const auto& z = c.zero_optimization;
  CHECK(z.stage == 0);
  CHECK(z.reduce_bucket_size == 500'000'000);
  CHECK(z.allgather_bucket_size == 500'000'000);
  CHECK_FALSE(z.overlap_comm);
  CHECK(z.contiguous_gradients);
  CHECK(z.reduce_scatter);
  CHECK(z.allgather_partitions);
  CHECK_FALSE(z.round_robin_gradients);
  CHECK(z.sub_group_size == 1'000'000'000);                // the docs say 1e12
  CHECK(z.stage3_prefetch_bucket_size == 50'000'000);      // the docs say 5e8
  CHECK(z.stage3_param_persistence_threshold == 100'000);  // the docs say 1e6
  CHECK(z.stage3_max_live_parameters == 1'000'000'000);
  CHECK(z.stage3_max_reuse_distance == 1'000'000'000);
  CHECK(z.offload_optimizer.device == OffloadDevice::None);
  CHECK(z.offload_optimizer.nvme_path.empty());
  CHECK_FALSE(z.offload_optimizer.pin_memory);
  CHECK(z.offload_optimizer.buffer_count == 4);
  CHECK(z.offload_optimizer.pipeline_read);  // ZRT's default; DeepSpeed's is false
  CHECK(z.offload_optimizer.pipeline_write);
  CHECK_FALSE(z.offload_optimizer.fast_init);
  CHECK(z.offload_optimizer.ratio == 1.0);
  CHECK(z.offload_param.device == OffloadDevice::None);
  CHECK(z.offload_param.buffer_count == 5);
  CHECK(z.offload_param.buffer_size == 100'000'000);
  CHECK(z.offload_param.max_in_cpu == 1'000'000'000);
  CHECK_FALSE(z.offload_param.pin_memory);
  CHECK(c.aio.block_size == 1'048'576);
  CHECK(c.aio.queue_depth == 8);
  CHECK(c.aio.intra_op_parallelism == 1);
  CHECK_FALSE(c.aio.single_submit);
  CHECK(c.aio.overlap_events);
  CHECK_FALSE(c.aio.use_gds);
  CHECK(deviceSpec(c) == "host");
}

TEST_CASE("overlap_comm defaults to true for stage 3 only, as in DeepSpeed's code") {
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    Config c = parse(detail::cat("{\"zero_optimization\": {\"stage\": ", stage, "}}"));
    CHECK(c.zero_optimization.overlap_comm == (stage == 3));
    Config off = parse(
        detail::cat("{\"zero_optimization\": {\"stage\": ", stage, ", \"overlap_comm\": false}}"));
    CHECK_FALSE(off.zero_optimization.overlap_comm);
  }
}

TEST_CASE("optimizer defaults and DeepSpeed's Adam being AdamW unless adam_w_mode is false") {
  Config adam = parse(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.001}}})");
  CHECK(adam.optimizer.present);
  CHECK(adam.optimizer.type == OptimizerType::Adam);
  CHECK(adam.optimizer.adam_w_mode);
  CHECK(adam.optimizer.beta1 == 0.9);
  CHECK(adam.optimizer.beta2 == 0.999);
  CHECK(adam.optimizer.eps == 1e-8);
  CHECK(adam.optimizer.weight_decay == 0.0);
  Config l2 = parse(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})");
  CHECK_FALSE(l2.optimizer.adam_w_mode);
  Config adamw = parse(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false,
                         "betas": [0.8, 0.95], "eps": "1e-6", "weight_decay": 3e-7}}})");
  CHECK(adamw.optimizer.adam_w_mode);  // AdamW is always decoupled
  CHECK(adamw.optimizer.beta1 == 0.8);
  CHECK(adamw.optimizer.beta2 == 0.95);
  CHECK(adamw.optimizer.eps == 1e-6);
  Config sgd = parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9,
                       "nesterov": true}}})");
  CHECK(sgd.optimizer.type == OptimizerType::SGD);
  CHECK(sgd.optimizer.momentum == 0.9);
  CHECK(sgd.optimizer.nesterov);
}

TEST_CASE("schedulers: WarmupLR defaults and WarmupDecayLR's total steps") {
  Config w = parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01}}})");
  CHECK(w.scheduler.type == SchedulerType::WarmupLR);
  CHECK(w.scheduler.warmup_min_lr == 0.0);
  CHECK(w.scheduler.warmup_max_lr == 0.01);
  CHECK(w.scheduler.warmup_num_steps == 1000);
  CHECK(w.scheduler.warmup_type == "log");
  Config d = parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 5000,
                     "warmup_num_steps": 100, "warmup_type": "linear"}}})");
  CHECK(d.scheduler.total_num_steps == 5000);
  CHECK(d.scheduler.warmup_type == "linear");
  Config a =
      parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}})");
  CHECK(a.scheduler.total_num_steps == 0);
}

TEST_CASE("schedulers: WarmupCosineLR's ratios, defaults and total steps") {
  Config d =
      parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000}}})");
  CHECK(d.scheduler.type == SchedulerType::WarmupCosineLR);
  CHECK(nameOf(d.scheduler.type) == "WarmupCosineLR");
  CHECK(d.scheduler.total_num_steps == 1000);
  CHECK(d.scheduler.warmup_min_ratio == 0.0);  // DeepSpeed's defaults
  CHECK(d.scheduler.cos_min_ratio == 1e-4);
  CHECK(d.scheduler.warmup_num_steps == 1000);
  CHECK(d.scheduler.warmup_type == "log");
  Config c = parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "5e3",
                     "warmup_min_ratio": 0.05, "warmup_num_steps": "auto", "cos_min_ratio": 0.1,
                     "warmup_type": "linear", "last_batch_iteration": -1}}})");
  CHECK(c.scheduler.total_num_steps == 5000);
  CHECK(c.scheduler.warmup_min_ratio == 0.05);
  CHECK(c.scheduler.cos_min_ratio == 0.1);
  CHECK(c.scheduler.warmup_num_steps == 1000);
  CHECK(c.scheduler.warmup_type == "linear");
  Config a = parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto",
                     "warmup_num_steps": 10}}})");
  CHECK(a.scheduler.total_num_steps == 0);
  std::string notes;
  for (const auto& n : a.resolution_notes) notes += n + "\n";
  CHECK(contains(notes, "scheduler.params.total_num_steps: \"auto\" -> left to the trainer"));
  std::string text = describe(c);
  CHECK(contains(text, "WarmupCosineLR lr x 0.05 -> x 1 over 1000 steps (linear)"));
  CHECK(contains(text, "cosine to lr x 0.1 by step 5000"));
}

TEST_CASE("numbers may be written as strings, and integers as exact floats") {
  Config c = parse(R"({"zero_optimization": {"stage": "3", "reduce_bucket_size": "2e8",
                      "allgather_bucket_size": 3e8, "stage3_prefetch_bucket_size": "12345678"},
                      "gradient_clipping": "1.5", "optimizer": {"type": "AdamW",
                      "params": {"lr": "3e-4"}}, "aio": {"block_size": "256K"}})");
  CHECK(c.zero_optimization.stage == 3);
  CHECK(c.zero_optimization.reduce_bucket_size == 200'000'000);
  CHECK(c.zero_optimization.allgather_bucket_size == 300'000'000);
  CHECK(c.zero_optimization.stage3_prefetch_bucket_size == 12'345'678);
  CHECK(c.gradient_clipping == 1.5);
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(c.aio.block_size == 256 * 1024);
}

TEST_CASE("\"auto\" is accepted where DeepSpeed accepts it and means the default") {
  Config c = parse(R"({"gradient_clipping": "auto", "gradient_accumulation_steps": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
      "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
      "warmup_num_steps": "auto"}},
      "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
      "stage3_max_live_parameters": "auto", "stage3_max_reuse_distance": "auto",
      "overlap_comm": "auto"}})");
  CHECK(c.gradient_clipping == 0.0);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.optimizer.beta2 == 0.999);
  CHECK(c.scheduler.warmup_num_steps == 1000);
  CHECK_FALSE(c.bf16.enabled);
  CHECK(c.zero_optimization.reduce_bucket_size == 500'000'000);
  CHECK(c.zero_optimization.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(c.zero_optimization.overlap_comm);  // stage 3's default
  std::string notes;
  for (const auto& n : c.resolution_notes) notes += n + "\n";
  CHECK(contains(notes, "zero_optimization.stage3_prefetch_bucket_size: \"auto\" -> 50000000"));
  CHECK(contains(notes, "gradient_clipping: \"auto\" -> 0"));
  CHECK(contains(describe(c), "zero_optimization.reduce_bucket_size: \"auto\" -> 500000000"));
}

TEST_CASE("bf16 \"auto\" follows the caller; the old section name bfloat16 is accepted") {
  ConfigOverrides o;
  o.bf16 = true;
  CHECK(parse(R"({"bf16": {"enabled": "auto"}})", 1, o).bf16.enabled);
  CHECK(parse(R"({"bfloat16": {"enabled": true}})").bf16.enabled);
  CHECK(parse("{}", 1, o).bf16.enabled);  // absent: the caller decides too
}

TEST_CASE("aio: thread_count and num_threads are aliases of intra_op_parallelism") {
  CHECK(parse(R"({"aio": {"thread_count": 4}})").aio.intra_op_parallelism == 4);
  CHECK(parse(R"({"aio": {"num_threads": 2}})").aio.intra_op_parallelism == 2);
  CHECK(parse(R"({"aio": {"intra_op_parallelism": 8, "thread_count": 8}})")
            .aio.intra_op_parallelism == 8);
  // DeepSpeed's NVMe tuner prints booleans as strings.
  Config tuned = parse(R"({"aio": {"single_submit": "false", "overlap_events": "true",
                         "intra_op_parallelism": 8, "queue_depth": 32, "block_size": 1048576}})");
  CHECK_FALSE(tuned.aio.single_submit);
  CHECK(tuned.aio.overlap_events);
  CHECK(tuned.aio.queue_depth == 32);
}

TEST_CASE("stage-3 keys accept DeepSpeed's short aliases") {
  Config c = parse(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000,
                      "param_persistence_threshold": 10, "max_live_parameters": 20,
                      "max_reuse_distance": 30}})");
  CHECK(c.zero_optimization.stage3_prefetch_bucket_size == 1000);
  CHECK(c.zero_optimization.stage3_param_persistence_threshold == 10);
  CHECK(c.zero_optimization.stage3_max_live_parameters == 20);
  CHECK(c.zero_optimization.stage3_max_reuse_distance == 30);
}

TEST_CASE("nvme_path may be one directory or a list of directories to stripe over") {
  Config c = parse(R"({"zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": ["/mnt/a", "/mnt/b", "/mnt/c"]},
      "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt/a"}}})");
  CHECK(c.zero_optimization.offload_param.nvme_path ==
        std::vector<std::string>{"/mnt/a", "/mnt/b", "/mnt/c"});
  CHECK(c.zero_optimization.offload_optimizer.nvme_path == std::vector<std::string>{"/mnt/a"});
}

TEST_CASE("DeepSpeed's deprecated cpu_offload booleans mean CPU offload") {
  Config c = parse(
      R"({"zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true}})");
  CHECK(c.zero_optimization.offload_optimizer.device == OffloadDevice::Cpu);
  CHECK(c.zero_optimization.offload_param.device == OffloadDevice::Cpu);
}

TEST_CASE("keys DeepSpeed defines that ZRT does not act on are accepted and listed") {
  Config c = parse(R"({"steps_per_print": 100, "wall_clock_breakdown": true,
      "zero_allow_untested_optimizer": true, "activation_checkpointing": {"partition_activations": true},
      "flops_profiler": {"enabled": false}, "tensorboard": {"enabled": true}, "comms_logger": {},
      "fp16": {"enabled": true, "auto_cast": false},
      "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}})");
  CHECK(c.steps_per_print == 100);
  CHECK(c.wall_clock_breakdown);
  for (const char* key :
       {"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
        "activation_checkpointing", "flops_profiler", "tensorboard", "comms_logger",
        "fp16.auto_cast", "zero_optimization.stage3_gather_16bit_weights_on_model_save"}) {
    CAPTURE(key);
    CHECK(std::find(c.ignored_keys.begin(), c.ignored_keys.end(), key) != c.ignored_keys.end());
  }
  std::string text = describe(c);
  CHECK(contains(text, "accepted, not acted on by ZRT:"));
  CHECK(contains(text, "activation_checkpointing"));
}

TEST_CASE("the zrt section: device, host memory as a byte size, communication timeout") {
  Config c =
      parse(R"({"zrt": {"device": "host", "host_device_memory": "8G", "comm_timeout_s": 30}})");
  CHECK(c.zrt.host_device_memory == 8ull << 30);
  CHECK(c.zrt.comm_timeout_s == 30.0);
  CHECK(deviceSpec(c) == "host:8589934592");
  Config inSpec = parse(R"({"zrt": {"device": "host:1G"}})");
  CHECK(inSpec.zrt.host_device_memory == 1ull << 30);
  CHECK(deviceSpec(inSpec) == "host:1073741824");
  Config same = parse(R"({"zrt": {"device": "host:1G", "host_device_memory": 1073741824}})");
  CHECK(same.zrt.host_device_memory == 1ull << 30);
  CHECK(deviceSpec(parse(R"({"zrt": {"device": "cuda:1"}})")) == "cuda:1");
  CHECK(deviceSpec(parse(R"({"zrt": {"device": "cuda"}})")) == "cuda");
}

TEST_CASE("the zrt section: the metrics endpoint is off and on loopback by default") {
  Config d = parse("{}");
  CHECK(d.zrt.metrics_port == 0);
  CHECK(d.zrt.metrics_address == "127.0.0.1");
  Config c = parse(R"({"zrt": {"metrics_address": "0.0.0.0", "metrics_port": 9400}})");
  CHECK(c.zrt.metrics_address == "0.0.0.0");
  CHECK(c.zrt.metrics_port == 9400);
}

TEST_CASE("toJson prints every default and loads back to the same config") {
  const char* texts[] = {
      "{}",
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": ["/a", "/b"]},
          "offload_optimizer": {"device": "cpu", "pin_memory": true}}, "fp16": {"enabled": true},
          "aio": {"thread_count": 4}, "zrt": {"device": "host:2G"}, "gradient_clipping": 1.0})",
      R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
          "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}},
          "train_batch_size": 64, "gradient_accumulation_steps": 4})",
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 5000,
          "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}}})",
      R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.02}}})",
  };
  for (const char* text : texts) {
    CAPTURE(text);
    Config first = parse(text, 4);
    nlohmann::json printed = toJson(first);
    for (const char* key : {"train_batch_size", "fp16", "bf16", "zero_optimization", "aio", "zrt"})
      CHECK(printed.contains(key));
    CHECK(printed["zero_optimization"].contains("offload_param"));
    Config second = parse(printed.dump(), 4);
    CHECK(toJson(second) == printed);
  }
}
