// The recommendation rule on constructed cases: each case sets the memory so that exactly the
// intended lever is the first that makes a strategy fit. Memory sizes are taken from the
// planner's own evaluations of the strategies involved, so the cases test the rule, not figures.
#include <doctest/doctest.h>

#include "tools/plan/strategy.h"

using namespace zrt;
using namespace zrt::plan;

namespace {

// A 1.3B-class transformer on 8 ranks of one node, fp16 Adam. DeepSpeed's default buffers
// (500M-element reduce buckets, 1B live parameters at stage 3) are as large as this model's
// shard, so the cases that need stage 3 to pay off use tuned, smaller ones.
PlanInputs inputs(std::uint64_t seqLen, std::uint64_t microBatch, bool tunedBuffers = true) {
  PlanInputs in;
  in.model = fromTransformerShape({24, 2048, 16, 50000});
  in.hardware.worldSize = 8;
  in.hardware.ranksPerNode = 8;
  in.hardware.hostBytes = 1ull << 40;
  in.hardware.nvmeBytes = 0;
  in.training.seqLen = seqLen;
  in.baseline.microBatch = microBatch;
  if (tunedBuffers) {
    in.training.zero.reduce_bucket_size = 50'000'000;
    in.training.zero.stage3_max_live_parameters = 100'000'000;
    in.training.zero.stage3_prefetch_bucket_size = 50'000'000;
    in.training.zero.sub_group_size = 10'000'000;
  }
  return in;
}

Strategy with(const PlanInputs& in, int stage, OffloadDevice opt = OffloadDevice::None,
              OffloadDevice param = OffloadDevice::None, bool ckpt = false, bool lora = false) {
  Strategy s = in.baseline;
  s.stage = stage;
  s.offloadOptimizer = opt;
  s.offloadParam = param;
  s.checkpointing = ckpt;
  s.lora = lora;
  return s;
}

std::uint64_t deviceBytes(const PlanInputs& in, const Strategy& s) {
  return evaluate(in, s).ledger.total(MemPlace::Device);
}

// A copy: callers pass temporaries.
Candidate recommended(const Plan& plan) {
  REQUIRE(plan.recommended.has_value());
  return plan.candidates[*plan.recommended];
}

}  // namespace

TEST_CASE("divisors, largest first, in O(sqrt(n)) steps") {
  CHECK(divisorsDescending(1) == std::vector<std::uint64_t>{1});
  CHECK(divisorsDescending(7) == std::vector<std::uint64_t>{7, 1});
  CHECK(divisorsDescending(12) == std::vector<std::uint64_t>{12, 6, 4, 3, 2, 1});
  CHECK(divisorsDescending(36) == std::vector<std::uint64_t>{36, 18, 12, 9, 6, 4, 3, 2, 1});
  // Against the plain definition.
  for (std::uint64_t n = 1; n <= 500; ++n) {
    std::vector<std::uint64_t> want;
    for (std::uint64_t d = n; d >= 1; --d)
      if (n % d == 0) want.push_back(d);
    CHECK(divisorsDescending(n) == want);
  }
  // The largest micro-batch accepted answers at once (the old loop tried every value below it).
  const auto big = divisorsDescending(kMaxMicroBatch);
  CHECK(big.size() == 25);
  CHECK(big.front() == kMaxMicroBatch);
  CHECK(big.back() == 1);
}

TEST_CASE("no change when the current strategy fits") {
  PlanInputs in = inputs(1024, 2);
  in.hardware.deviceBytes = deviceBytes(in, in.baseline);
  const Plan plan = makePlan(in);
  const Candidate& r = recommended(plan);
  CHECK(r.level == kNoChange);
  CHECK(r.fitting->strategy.id() == "z0");
  CHECK(r.fitting->strategy.microBatch == 2);
  CHECK(r.slowdown == doctest::Approx(0.0));
  // One byte less and it does not.
  in.hardware.deviceBytes -= 1;
  CHECK(recommended(makePlan(in)).level != kNoChange);
}

TEST_CASE("accumulation: a smaller micro-batch that divides the given one keeps the batch") {
  PlanInputs in = inputs(1024, 4);
  // Half the micro-batch, twice the accumulation steps (which in fp16 adds the fp32 gradient
  // accumulator): what the plan evaluates for micro-batch 2.
  Strategy half = in.baseline;
  half.microBatch = 2;
  half.gradAccum = 2;
  in.hardware.deviceBytes = deviceBytes(in, half);
  const Candidate& r = recommended(makePlan(in));
  CHECK(r.level == kAccumulation);
  CHECK(r.fitting->strategy.id() == "z0");
  CHECK(r.fitting->strategy.microBatch == 2);
  CHECK(r.fitting->strategy.gradAccum == 2);
}

TEST_CASE("checkpointing before ZeRO when both would fit (the stated order)") {
  PlanInputs in = inputs(2048, 1);
  const std::uint64_t ckpt = deviceBytes(in, with(in, 0, OffloadDevice::None, OffloadDevice::None, true));
  const std::uint64_t z1 = deviceBytes(in, with(in, 1));
  in.hardware.deviceBytes = std::max(ckpt, z1);
  REQUIRE(deviceBytes(in, in.baseline) > in.hardware.deviceBytes);
  const Plan plan = makePlan(in);
  const Candidate& r = recommended(plan);
  CHECK(r.level == kCheckpointing);
  CHECK(r.fitting->strategy.id() == "z0-ckpt");
  // Recomputation costs about one extra forward: a third of the compute.
  CHECK(r.fitting->time.recompute / r.fitting->time.compute == doctest::Approx(1.0 / 3));
  // The slowdown is that recomputation over the whole step (which also communicates).
  CHECK(r.slowdown == doctest::Approx(r.fitting->time.recompute / plan.baseline.time.total()));
  CHECK(r.slowdown <= 1.0 / 3);
}

TEST_CASE("ZeRO stage 1/2, then stage 3") {
  // Short sequences: model states dominate, so checkpointing does not close the gap.
  PlanInputs in = inputs(128, 1);
  in.hardware.deviceBytes = deviceBytes(in, with(in, 2));
  REQUIRE(deviceBytes(in, with(in, 0, OffloadDevice::None, OffloadDevice::None, true)) > in.hardware.deviceBytes);
  Candidate r = recommended(makePlan(in));
  CHECK(r.level == kStage12);
  CHECK(r.fitting->strategy.id() == "z2");

  in.hardware.deviceBytes = deviceBytes(in, with(in, 3));
  REQUIRE(deviceBytes(in, with(in, 2, OffloadDevice::None, OffloadDevice::None, true)) > in.hardware.deviceBytes);
  r = recommended(makePlan(in));
  CHECK(r.level == kStage3);
  CHECK(r.fitting->strategy.stage == 3);
  CHECK(r.fitting->strategy.offloadOptimizer == OffloadDevice::None);
}

TEST_CASE("CPU offload, then NVMe offload when the host is too small") {
  PlanInputs in = inputs(128, 1);
  in.hardware.deviceBytes = deviceBytes(in, with(in, 3, OffloadDevice::Cpu));
  REQUIRE(deviceBytes(in, with(in, 3, OffloadDevice::None, OffloadDevice::None, true)) > in.hardware.deviceBytes);
  Candidate r = recommended(makePlan(in));
  CHECK(r.level == kCpuOffload);
  CHECK(r.fitting->strategy.offloadOptimizer == OffloadDevice::Cpu);
  CHECK(r.fitting->time.pcie > 0);
  CHECK(r.fitting->time.cpuOptimizer > 0);
  CHECK(r.slowdown > 0);

  // The node's host memory holds less than 8 ranks' offloaded optimizer state, NVMe has room.
  const Evaluation cpu = evaluate(in, with(in, 3, OffloadDevice::Cpu));
  in.hardware.hostBytes = cpu.ledger.hostTotal() * 8 - 1;
  in.hardware.nvmeBytes = 1ull << 42;
  r = recommended(makePlan(in));
  CHECK(r.level == kNvmeOffload);
  CHECK(r.fitting->strategy.offloadOptimizer == OffloadDevice::Nvme);
  CHECK(r.fitting->time.nvme > 0);
}

TEST_CASE("adapters last") {
  PlanInputs in = inputs(128, 1, false);
  in.loraModel = addLora(in.model, 8, {"q", "k", "v", "o"});
  // One node with 1 GiB of host memory and no NVMe: nothing can be offloaded, and stages 2-3,
  // which stage their reduce buckets in host memory (2 · 5e8 fp16 elements a rank), cannot run.
  in.hardware.hostBytes = 1ull << 30;
  in.hardware.nvmeBytes = 0;
  const Strategy loraZ0 = with(in, 0, OffloadDevice::None, OffloadDevice::None, false, true);
  in.hardware.deviceBytes = deviceBytes(in, loraZ0);
  REQUIRE(evaluate(in, loraZ0).fits());
  // Nothing without adapters fits: stages 0-1 hold whole parameters and gradients, more than the
  // frozen base with adapters.
  REQUIRE(deviceBytes(in, with(in, 1, OffloadDevice::None, OffloadDevice::None, true)) > in.hardware.deviceBytes);
  REQUIRE(!evaluate(in, with(in, 3, OffloadDevice::Nvme, OffloadDevice::Nvme, true)).fits());
  REQUIRE(!evaluate(in, with(in, 3, OffloadDevice::Cpu, OffloadDevice::Cpu, true)).fits());
  const Candidate& r = recommended(makePlan(in));
  CHECK(r.level == kAdapters);
  CHECK(r.fitting->strategy.lora);
}

TEST_CASE("nothing fits: no recommendation") {
  PlanInputs in = inputs(128, 1);
  in.hardware.deviceBytes = 1 << 20;
  const Plan plan = makePlan(in);
  CHECK_FALSE(plan.recommended.has_value());
  for (const auto& c : plan.candidates) CHECK_FALSE(c.fitting.has_value());
}

TEST_CASE("lever levels relative to the current strategy") {
  Strategy base;
  base.stage = 2;
  Strategy s = base;
  CHECK(leverLevel(base, s) == kNoChange);
  s.stage = 1;  // a change back is a change too: only the current strategy is "no change"
  CHECK(leverLevel(base, s) == kStage12);
  s.stage = 3;
  CHECK(leverLevel(base, s) == kStage3);
  s.offloadOptimizer = OffloadDevice::Cpu;
  CHECK(leverLevel(base, s) == kCpuOffload);
  s.offloadParam = OffloadDevice::Nvme;
  CHECK(leverLevel(base, s) == kNvmeOffload);
  s.lora = true;
  CHECK(leverLevel(base, s) == kAdapters);
  Strategy offloaded = base;
  offloaded.offloadOptimizer = OffloadDevice::Nvme;
  CHECK(leverLevel(offloaded, base) == kCpuOffload);  // removing offload changes the offload lever
  Strategy ckpt = base;
  ckpt.checkpointing = true;
  CHECK(leverLevel(ckpt, base) == kCheckpointing);
}

TEST_CASE("candidates: every valid stage x offload pairing, with and without checkpointing") {
  PlanInputs in = inputs(128, 1);
  const auto all = candidateStrategies(in);
  CHECK(all.size() == 20);  // (1 + 2 + 2 + 5) x 2
  for (const auto& s : all) CHECK_NOTHROW(validateOffload(s.stage, s.offloadOptimizer, s.offloadParam));
  in.model = fromParamCount(1'000'000'000, "count");  // no shape: checkpointing cannot be judged
  CHECK(candidateStrategies(in).size() == 10);
}

TEST_CASE("evaluate: the accumulation steps reach the placement (16-bit: the fp32 accumulator)") {
  PlanInputs in;
  in.model = fromParamCount(1'000'000, "test");
  in.hardware.worldSize = 2;
  in.training.precision = DType::BF16;
  Strategy s;
  s.stage = 2;
  s.microBatch = 1;
  s.gradAccum = 1;
  // Ψ' = 1,000,000 (a multiple of 64), shard 500,000: bf16 gradients 2 · 500,000 bytes.
  CHECK(evaluate(in, s).ledger.get(Purpose::Gradients, MemPlace::Device) == 2 * 500'000);
  // Four micro-steps add up in an fp32 accumulator of the shard: 4 · 500,000 bytes more.
  s.gradAccum = 4;
  const Evaluation e = evaluate(in, s);
  CHECK(e.placement.gradientAccumulator.elements == 500'000);
  CHECK(e.ledger.get(Purpose::Gradients, MemPlace::Device) == 2 * 500'000 + 4 * 500'000);
  // fp32 training sums in place: no accumulator.
  in.training.precision = DType::F32;
  CHECK(evaluate(in, s).ledger.get(Purpose::Gradients, MemPlace::Device) == 4 * 500'000);
}

TEST_CASE("evaluate: offload_param nvme keeps max_in_cpu elements of the shard in host memory") {
  PlanInputs in;
  in.model = fromParamCount(1'000'000, "test");
  in.hardware.worldSize = 2;
  in.training.precision = DType::F32;
  Strategy s;
  s.stage = 3;
  s.offloadOptimizer = OffloadDevice::Cpu;
  s.offloadParam = OffloadDevice::Nvme;
  in.training.zero.offload_param.pin_memory = true;
  // DeepSpeed's default max_in_cpu (1e9) keeps the whole 500,000-element shard in memory.
  CHECK(evaluate(in, s).ledger.get(Purpose::Parameters, MemPlace::PinnedHost) == 4 * 500'000);
  CHECK(evaluate(in, s).ledger.get(Purpose::Parameters, MemPlace::Nvme) == 0);
  // max_in_cpu 0: all of it on NVMe.
  in.training.zero.offload_param.max_in_cpu = 0;
  CHECK(evaluate(in, s).ledger.get(Purpose::Parameters, MemPlace::PinnedHost) == 0);
  CHECK(evaluate(in, s).ledger.get(Purpose::Parameters, MemPlace::Nvme) == 4 * 500'000);
}

TEST_CASE("evaluate: an activation model replaces the estimate, place by place") {
  PlanInputs in = inputs(2048, 4);
  in.activationModel = ActivationModel{"made up", [](const Strategy& s) {
                                         std::array<std::uint64_t, kNumMemPlaces> b{};
                                         b[static_cast<int>(MemPlace::Device)] = 1000 * s.microBatch;
                                         b[static_cast<int>(MemPlace::PinnedHost)] = s.checkpointing ? 7 : 0;
                                         return b;
                                       }};
  Strategy s = with(in, 0);
  const Evaluation e = evaluate(in, s);
  CHECK(e.activationsKnown);
  CHECK(e.ledger.get(Purpose::Activations, MemPlace::Device) == 4000);
  s.checkpointing = true;
  CHECK(evaluate(in, s).ledger.get(Purpose::Activations, MemPlace::PinnedHost) == 7);
}
