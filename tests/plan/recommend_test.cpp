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
  Strategy half = in.baseline;
  half.microBatch = 2;
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
  in.hardware.nvmeBytes = 1ull << 42;
  in.hardware.deviceBytes = deviceBytes(in, with(in, 0, OffloadDevice::None, OffloadDevice::None, false, true));
  // Nothing without adapters fits, not even everything offloaded to NVMe with checkpointing.
  REQUIRE(deviceBytes(in, with(in, 3, OffloadDevice::Nvme, OffloadDevice::Nvme, true)) > in.hardware.deviceBytes);
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
