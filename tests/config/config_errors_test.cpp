// Bad input: each kind of mistake gives a ConfigError naming the file, the JSON path and the
// problem in words a user can act on.
#include <doctest/doctest.h>

#include "tests/config/config_test_util.h"

using namespace zrt;
using zrt::test::configErrorOf;
using zrt::test::contains;

#define CHECK_HAS(text, part) \
  CHECK_MESSAGE(contains(text, part), "missing '" << part << "' in: " << text)

TEST_CASE("malformed JSON: the file, line and column") {
  std::string e = configErrorOf("{\n  \"zero_optimization\": {\n    \"stage\": 2,\n  }\n}");
  CHECK_HAS(e, "bad.json: malformed JSON at line 4, column 3");
  CHECK_HAS(e, "}\n      ^");
}

TEST_CASE("wrong type: names the path, what was expected and what was given") {
  std::string e = configErrorOf(R"({"zero_optimization": {"stage": "two"}})");
  CHECK_HAS(e, "bad.json: zero_optimization.stage: expected an integer, got string \"two\"");
  e = configErrorOf(R"({"fp16": {"enabled": 1}})");
  CHECK_HAS(e, "bad.json: fp16.enabled: expected true or false, got number 1");
  e = configErrorOf(R"({"zero_optimization": {"offload_param": {"nvme_path": 5}}})");
  CHECK_HAS(e, "zero_optimization.offload_param.nvme_path: expected a directory or a list");
  e = configErrorOf(R"({"zero_optimization": 2})");
  CHECK_HAS(e, "zero_optimization: expected an object");
  e = configErrorOf(R"({"optimizer": {"type": "AdamW", "params": {"betas": 0.9}}})");
  CHECK_HAS(e, "optimizer.params.betas: expected a list of 2 numbers");
  e = configErrorOf(R"({"aio": {"block_size": "big"}})");
  CHECK_HAS(e, "aio.block_size: expected a byte size");
  e = configErrorOf(R"([1, 2])");
  CHECK_HAS(e, "bad.json: the top level must be a JSON object");
}

TEST_CASE("out-of-range values say the allowed range") {
  struct Case {
    const char* text;
    const char* part;
  };
  Case cases[] = {
      {R"({"zero_optimization": {"stage": 4}})",
       "zero_optimization.stage: value 4 is out of range: must be between 0 and 3"},
      {R"({"aio": {"queue_depth": 0}})",
       "aio.queue_depth: value 0 is out of range: must be between 1 and 32768"},
      {R"({"aio": {"block_size": 1000}})", "aio.block_size: value 1000"},
      {R"({"aio": {"block_size": 6000}})", "not a multiple of 4096"},
      {R"({"train_micro_batch_size_per_gpu": 0})",
       "train_micro_batch_size_per_gpu: value 0 is out of range: must be >= 1"},
      {R"({"train_micro_batch_size_per_gpu": 1e30})",
       "train_micro_batch_size_per_gpu: value 1e+30 is out of range: must be between 1 and 9223372036854775807"},
      {R"({"train_micro_batch_size_per_gpu": 18446744073709551615})",
       "value 18446744073709551615 is out of range: must be between 1 and 9223372036854775807"},
      {R"({"gradient_clipping": -1})", "gradient_clipping: value -1 is out of range: must be >= 0"},
      {R"({"zero_optimization": {"reduce_bucket_size": -5}})",
       "zero_optimization.reduce_bucket_size: value -5"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
       "zero_optimization.offload_optimizer.ratio: value 1.5 is out of range: must be between 0 "
       "and 1"},
      {R"({"optimizer": {"type": "AdamW", "params": {"eps": 0}}})",
       "optimizer.params.eps: value 0 is out of range: must be > 0"},
      {R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})",
       "each beta must be below 1"},
      {R"({"fp16": {"initial_scale_power": 100}})", "fp16.initial_scale_power: value 100"},
      {R"({"zrt": {"comm_timeout_s": 0}})",
       "zrt.comm_timeout_s: value 0 is out of range: must be > 0"},
      {R"({"zrt": {"metrics_port": 70000}})", "zrt.metrics_port: value 70000 is out of range"},
      {R"({"train_batch_size": 1e30})", "train_batch_size: value 1e+30 is out of range"},
      {R"({"zero_optimization": {"sub_group_size": 18446744073709551615}})",
       "zero_optimization.sub_group_size: value 18446744073709551615 is out of range"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    std::string e = configErrorOf(c.text);
    CHECK_HAS(e, c.part);
    CHECK_HAS(e, "bad.json");
  }
}

TEST_CASE("integer keys reject fractional values") {
  std::string e = configErrorOf(R"({"train_micro_batch_size_per_gpu": 2.5})");
  CHECK_HAS(e, "train_micro_batch_size_per_gpu: expected a whole number, got number 2.5");
  e = configErrorOf(R"({"zero_optimization": {"reduce_bucket_size": "2.5e0"}})");
  CHECK_HAS(e, "zero_optimization.reduce_bucket_size: expected a whole number");
  e = configErrorOf(R"({"zero_optimization": {"offload_param": {"buffer_count": 4.2}}})");
  CHECK_HAS(e, "zero_optimization.offload_param.buffer_count: expected a whole number");
}

TEST_CASE("unknown keys name the JSON path and suggest the nearest known key") {
  std::string e = configErrorOf(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "nvme_pth": "/x"}}})");
  CHECK_HAS(e,
            "bad.json: zero_optimization.offload_optimizer.nvme_pth: unknown key; did you mean "
            "'nvme_path'?");
  e = configErrorOf(R"({"zero_optimisation": {"stage": 2}})");
  CHECK_HAS(e, "zero_optimisation: unknown key; did you mean 'zero_optimization'?");
  e = configErrorOf(R"({"steps_per_prnt": 10})");
  CHECK_HAS(e, "did you mean 'steps_per_print'?");
  e = configErrorOf(R"({"fp16": {"enabled": true, "loss_scale_windw": 500}})");
  CHECK_HAS(e, "fp16.loss_scale_windw: unknown key; did you mean 'loss_scale_window'?");
  e = configErrorOf(R"({"zero_optimization": {"stage3_prefetch_bucket": 5}})");
  CHECK_HAS(e, "did you mean 'stage3_prefetch_bucket_size'?");
  // Nothing close: the keys accepted there are listed.
  e = configErrorOf(R"({"zero_optimization": {"offload_param": {"xyzzy": 1}}})");
  CHECK_HAS(e,
            "zero_optimization.offload_param.xyzzy: unknown key (keys accepted here: buffer_count, "
            "buffer_size, device, max_in_cpu, nvme_path, pin_memory)");
}

TEST_CASE("the aio section is validated like every other (DeepSpeed ignores typos there)") {
  std::string e = configErrorOf(R"({"aio": {"queue_dept": 8}})");
  CHECK_HAS(e, "aio.queue_dept: unknown key; did you mean 'queue_depth'?");
  e = configErrorOf(R"({"aio": {"thread_count": "four"}})");
  CHECK_HAS(e, "aio.thread_count: expected an integer, got string \"four\"");
  e = configErrorOf(R"({"aio": {"overlap_events": "yes"}})");
  CHECK_HAS(e, "aio.overlap_events: expected true or false");
}

TEST_CASE("aliases given with different values are an error") {
  std::string e = configErrorOf(R"({"aio": {"intra_op_parallelism": 2, "thread_count": 4}})");
  CHECK_HAS(e, "aio.thread_count: conflicts with aio.intra_op_parallelism = 2");
  e = configErrorOf(R"({"aio": {"thread_count": 4, "num_threads": 8}})");
  CHECK_HAS(e, "aio.num_threads: conflicts with aio.thread_count = 4");
  e = configErrorOf(
      R"({"zero_optimization": {"stage3_max_live_parameters": 1, "max_live_parameters": 2}})");
  CHECK_HAS(e, "zero_optimization.max_live_parameters: conflicts with");
}

TEST_CASE("device nvme needs nvme_path") {
  std::string e =
      configErrorOf(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})");
  CHECK_HAS(e, "bad.json: zero_optimization.offload_param.nvme_path: missing: device is \"nvme\"");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": null}}})");
  CHECK_HAS(e, "zero_optimization.offload_optimizer.nvme_path: missing");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": []}}})");
  CHECK_HAS(e, "zero_optimization.offload_optimizer.nvme_path: the list of directories is empty");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": ""}}})");
  CHECK_HAS(e, "a directory name is empty");
  // A misspelt nvme_path with device nvme: the typo, not the missing key, is what to report.
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_pth": "/x"}}})");
  CHECK_HAS(e, "offload_optimizer.nvme_pth: unknown key; did you mean 'nvme_path'?");
}

TEST_CASE("offload placements a stage cannot do") {
  std::string e =
      configErrorOf(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  CHECK_HAS(
      e,
      "zero_optimization.offload_param.device: parameter offload needs ZeRO stage 3 (stage is 2)");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})");
  CHECK_HAS(e, "optimizer offload needs ZeRO stage 1, 2 or 3");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})");
  CHECK_HAS(e, "NVMe optimizer offload needs ZeRO stage 3");
  e = configErrorOf(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  CHECK_HAS(e, "ratio below 1");
  e = configErrorOf(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}}})");
  CHECK_HAS(e, "zero_optimization.offload_param.device: unknown value \"disk\"");
  CHECK_HAS(e, "(accepted: none, cpu, nvme)");
}

TEST_CASE("\"auto\" where DeepSpeed does not take it is an error") {
  for (const char* text :
       {R"({"aio": {"queue_depth": "auto"}})", R"({"zero_optimization": {"stage": "auto"}})",
        R"({"zrt": {"comm_timeout_s": "auto"}})",
        R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "auto"}}})"}) {
    CAPTURE(text);
    CHECK_HAS(configErrorOf(text), "\"auto\" is not accepted for this key");
  }
}

TEST_CASE("precision: fp16 and bf16 together, and file values against the caller's") {
  std::string e = configErrorOf(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  CHECK_HAS(e, "bf16: fp16 and bf16 cannot both be enabled");
  ConfigOverrides both;
  both.fp16 = true;
  both.bf16 = true;
  e = configErrorOf(R"({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})", 1, both);
  CHECK_HAS(e, "cannot both be enabled");
  ConfigOverrides fp16;
  fp16.fp16 = true;
  e = configErrorOf(R"({"fp16": {"enabled": false}})", 1, fp16);
  CHECK_HAS(e, "fp16.enabled: the file says false but the caller asks for true");
  e = configErrorOf(R"({"bf16": {}, "bfloat16": {}})");
  CHECK_HAS(e, "bfloat16: give bf16 or its old name bfloat16, not both");
}

TEST_CASE("optimizer and scheduler mistakes") {
  std::string e = configErrorOf(R"({"optimizer": {"type": "Lamb"}})");
  CHECK_HAS(e, "optimizer.type: unknown value \"Lamb\"");
  CHECK_HAS(e, "(accepted: Adam, AdamW, SGD)");
  e = configErrorOf(R"({"optimizer": {"params": {"lr": 1}}})");
  CHECK_HAS(e, "optimizer.type: missing");
  e = configErrorOf(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}})");
  CHECK_HAS(e, "optimizer.params.max_grad_norm: not an optimizer parameter here");
  CHECK_HAS(e, "gradient_clipping");
  e = configErrorOf(R"({"optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.99]}}})");
  CHECK_HAS(e, "optimizer.params.betas: unknown key");
  e = configErrorOf(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})");
  CHECK_HAS(e, "optimizer.params.amsgrad: AMSGrad is not supported");
  e = configErrorOf(R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})");
  CHECK_HAS(e, "scheduler.params.total_num_steps: missing");
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_num_steps": 100}}})");
  CHECK_HAS(e,
            "scheduler.params.total_num_steps: total_num_steps 10 is below warmup_num_steps 100");
  e = configErrorOf(R"({"scheduler": {"type": "OneCycle"}})");
  CHECK_HAS(e, "scheduler.type: unknown value \"OneCycle\"");
  e = configErrorOf(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})");
  CHECK_HAS(e, "scheduler.params.warmup_type: unknown value \"cosine\"");
  e = configErrorOf(R"({"scheduler": {"type": "WarmupCosineLR", "params": {}}})");
  CHECK_HAS(e, "scheduler.params.total_num_steps: missing; WarmupCosineLR needs the number");
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "cos_min_ratio": 1.5}}})");
  CHECK_HAS(e,
            "scheduler.params.cos_min_ratio: value 1.5 is out of range: must be between 0 and 1");
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_min_ratio": -0.1}}})");
  CHECK_HAS(e, "scheduler.params.warmup_min_ratio");
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_num_steps": 0}}})");
  CHECK_HAS(e, "scheduler.params.warmup_num_steps");
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_num_steps": 100}}})");
  CHECK_HAS(e,
            "scheduler.params.total_num_steps: total_num_steps 10 is below warmup_num_steps 100");
  // WarmupCosineLR works in ratios of the optimizer's lr: the lr keys are not its parameters.
  e = configErrorOf(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 2000, "warmup_max_lr": 0.1}}})");
  CHECK_HAS(e, "scheduler.params.warmup_max_lr: unknown key");
  e = configErrorOf(R"({"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}})");
  CHECK_HAS(e, "scheduler.params.cos_min_ratio: unknown key");
}

TEST_CASE("the zrt section is validated the same way") {
  std::string e = configErrorOf(R"({"zrt": {"device": "tpu"}})");
  CHECK_HAS(e, "zrt.device: unknown device \"tpu\"");
  e = configErrorOf(R"({"zrt": {"device": "host:lots"}})");
  CHECK_HAS(e, "zrt.device: bad capacity 'lots'");
  e = configErrorOf(R"({"zrt": {"device": "cuda:x"}})");
  CHECK_HAS(e, "zrt.device: bad ordinal");
  e = configErrorOf(R"({"zrt": {"host_device_memory": "8Q"}})");
  CHECK_HAS(e, "zrt.host_device_memory: expected a byte size");
  e = configErrorOf(R"({"zrt": {"device": "cuda", "host_device_memory": "8G"}})");
  CHECK_HAS(e, "zrt.host_device_memory: applies to the host device only");
  e = configErrorOf(R"({"zrt": {"device": "host:4G", "host_device_memory": "8G"}})");
  CHECK_HAS(e, "zrt.host_device_memory: 8589934592 bytes conflicts with device \"host:4G\"");
  e = configErrorOf(R"({"zrt": {"comm_timeout": 5}})");
  CHECK_HAS(e, "zrt.comm_timeout: unknown key; did you mean 'comm_timeout_s'?");
}

TEST_CASE("aio nested inside zero_optimization (as some guides print it) gets a pointed hint") {
  std::string e =
      configErrorOf(R"({"zero_optimization": {"stage": 3, "aio": {"block_size": 262144}}})");
  CHECK_HAS(e, "zero_optimization.aio: aio is a top-level section");
}

TEST_CASE("elastic training is refused rather than ignored") {
  std::string e =
      configErrorOf(R"({"elasticity": {"enabled": true, "max_train_batch_size": 2000}})");
  CHECK_HAS(e, "elasticity.enabled: elastic training is not supported");
  CHECK_NOTHROW(parseConfig(R"({"elasticity": {"enabled": false}})", "ok.json", 1));
}

TEST_CASE("a missing file is a ConfigError naming it") {
  try {
    loadConfig("/nonexistent/ds_config.json", 1);
    FAIL_CHECK("loaded");
  } catch (const ConfigError& e) {
    CHECK(e.source() == "/nonexistent/ds_config.json");
    CHECK_HAS(std::string(e.what()), "cannot open: No such file or directory");
  }
}

TEST_CASE("every ConfigError is an InvalidArgument, so callers can catch either") {
  CHECK_THROWS_AS(parseConfig("{\"stage\": 1}", "x.json", 1), InvalidArgument);
  CHECK_THROWS_AS(parseConfig("{", "x.json", 1), Error);
}
