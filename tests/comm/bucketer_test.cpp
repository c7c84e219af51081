// The bucketers on ranks-as-threads: every stage, overlap on and off, contiguous gradients on
// and off, gradients arriving in a different order on each rank, accumulation over passes;
// the result must equal an unbucketed all-reduce of the whole flat gradient followed by the
// same division, bit for bit (the threads backend sums in rank order whatever the bucket).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "core/element_arithmetic.h"
#include "comm/threads/thread_world.h"
#include "core/shard.h"
#include "core/error.h"
#include "tests/comm/comm_test_util.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

namespace {

const std::vector<std::size_t> kNumels = {5, 0, 130, 1, 64, 77, 3, 250, 0, 19, 33};

// Gradient of tensor t in pass `pass` on `rank`.
Buf gradient(DType dt, int rank, std::size_t t, int pass) {
  Buf g(dt, kNumels[t]);
  for (std::size_t i = 0; i < g.size(); ++i)
    g.set(i, test::randomValue(rank * 100 + pass, t * 1000 + i, dt));
  return g;
}

// The flat gradient of one pass on `rank`.
Buf flatGradient(DType dt, int rank, int pass) {
  const std::size_t total = std::accumulate(kNumels.begin(), kNumels.end(), std::size_t{0});
  Buf f(dt, total);
  std::size_t at = 0;
  for (std::size_t t = 0; t < kNumels.size(); ++t) {
    Buf g = gradient(dt, rank, t, pass);
    if (!g.bytes.empty()) std::memcpy(f.bytes.data() + at * dtypeSize(dt), g.data(), g.bytes.size());
    at += g.size();
  }
  return f;
}

struct Case {
  int stage;
  bool overlap;
  bool contiguous;
  std::size_t bucket;
};

}  // namespace

TEST_CASE("gradient bucketer equals an unbucketed all-reduce, every stage and option") {
  const std::vector<Case> cases = {
      {0, false, true, 100}, {1, true, true, 64},  {1, true, false, 1},   {2, true, true, 100},
      {2, false, true, 40},  {2, true, false, 7},  {3, true, true, 1000}, {3, false, false, 250}};
  for (int world : {1, 2, 3, 4}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (const Case& c : cases) {
        CAPTURE(world);
        CAPTURE(nameOf(dt));
        CAPTURE(c.stage);
        CAPTURE(c.overlap);
        CAPTURE(c.contiguous);
        CAPTURE(c.bucket);
        std::vector<int> bad(static_cast<std::size_t>(world), 0);
        ThreadWorld::run(world, [&](Communicator& comm) {
          const int me = comm.rank();
          GradientBucketerOptions o;
          o.stage = c.stage;
          o.reduceBucketSize = c.bucket;
          o.overlapComm = c.overlap;
          o.contiguousGradients = c.contiguous;
          o.dtype = dt;
          GradientBucketer bucketer(comm, kNumels, o);
          // Reference: the whole flat gradient all-reduced at once, divided, accumulated.
          Buf ref = flatGradient(dt, me, 0);
          comm.allReduce(ref.data(), ref.size(), dt);
          divideBy(dt, ref.data(), ref.size(), static_cast<float>(world));
          Buf second = flatGradient(dt, me, 1);
          comm.allReduce(second.data(), second.size(), dt);
          addDivided(dt, ref.data(), second.data(), ref.size(), static_cast<float>(world));

          std::mt19937 rng(static_cast<unsigned>(me) * 7 + 1);
          for (int pass = 0; pass < 2; ++pass) {
            bucketer.beginBackward(/*accumulate=*/pass == 1);
            std::vector<std::size_t> order(kNumels.size());
            std::iota(order.rbegin(), order.rend(), 0);  // backward order...
            if (me % 2 == 1) std::shuffle(order.begin(), order.end(), rng);  // ...or any order
            std::vector<Buf> grads;
            for (std::size_t t = 0; t < kNumels.size(); ++t) grads.push_back(gradient(dt, me, t, pass));
            for (std::size_t t : order) {
              bucketer.gradientReady(t, grads[t].data());
              // With contiguous gradients the caller may reuse its memory at once.
              if (c.contiguous) std::fill(grads[t].bytes.begin(), grads[t].bytes.end(), char(0x7f));
            }
            bucketer.finishBackward();
          }
          const std::size_t total = ref.size();
          const std::size_t es = dtypeSize(dt);
          if (c.stage < 2) {
            bad[static_cast<std::size_t>(me)] +=
                bucketer.outputCount() != total ||
                std::memcmp(bucketer.output(), ref.data(), total * es) != 0;
          } else {
            const ShardRange s = shardOf(total, world, me, kShardAlignElements);
            bad[static_cast<std::size_t>(me)] += bucketer.outputCount() != s.count;
            bad[static_cast<std::size_t>(me)] +=
                std::memcmp(bucketer.output(), ref.bytes.data() + s.begin * es, s.valid * es) != 0;
            for (std::size_t i = s.valid; i < s.count; ++i)  // padding stays zero
              bad[static_cast<std::size_t>(me)] += loadElement(dt, bucketer.output(), i) != 0.f;
          }
        });
        for (int b : bad) CHECK(b == 0);
      }
    }
  }
}

TEST_CASE("bucketerMemory: worked by hand") {
  // Tensors of 10 and 20 fp32 elements in one bucket of 30; on 2 ranks the padded flat buffer is
  // 64 elements (shards of 32), so rank 0's shard holds the bucket's 30 and rank 1's none of it.
  const std::vector<std::size_t> numels = {10, 20};
  const GradBucketPlan plan = planGradientBuckets(numels, 1000);
  // Stages 0/1: in place in the caller's buffer, or a flat buffer of its own; the running sum.
  CHECK(bucketerMemory(plan, 1, true, DType::F32, true, 2, 0).buffers == 0);
  CHECK(bucketerMemory(plan, 0, false, DType::F32, false, 2, 1).buffers == 30 * 4);
  CHECK(bucketerMemory(plan, 0, false, DType::BF16, true, 2, 1).accumulation == 30 * 2);
  // Stage 2 with overlap: two staging buffers of the largest bucket, the shard when the caller
  // gives no output, and a receive buffer for the bucket's piece of this rank's shard.
  BucketerMemory m = bucketerMemory(plan, 2, true, DType::F32, true, 2, 0);
  CHECK(m.buffers == 2 * 30 * 4);
  CHECK(m.accumulation == 30 * 4);
  m = bucketerMemory(plan, 3, true, DType::F32, false, 2, 1);
  CHECK(m.buffers == 2 * 30 * 4 + 32 * 4);
  CHECK(m.accumulation == 0);
  // Two buckets (of 20 and 10, in backward order) in one slot: the larger piece.
  const GradBucketPlan two = planGradientBuckets(numels, 20);
  m = bucketerMemory(two, 2, false, DType::F32, true, 2, 0);
  CHECK(m.buffers == 1 * 20 * 4);
  CHECK(m.accumulation == 20 * 4);
}

TEST_CASE("the ledger holds what bucketerMemory says, before and after an accumulating pass") {
  for (int world : {1, 2, 3}) {
    for (int stage : {0, 1, 2, 3}) {
      for (bool overlap : {false, true}) {
        for (bool callerOutput : {false, true}) {
          CAPTURE(world);
          CAPTURE(stage);
          CAPTURE(overlap);
          CAPTURE(callerOutput);
          std::vector<int> bad(static_cast<std::size_t>(world), 0);
          ThreadWorld::run(world, [&](Communicator& comm) {
            const int me = comm.rank();
            MemoryLedger ledger;
            GradientBucketerOptions o;
            o.stage = stage;
            o.reduceBucketSize = 100;
            o.overlapComm = overlap;
            o.ledger = &ledger;
            const std::size_t total = std::accumulate(kNumels.begin(), kNumels.end(), std::size_t{0});
            const ShardRange shard = shardOf(total, world, me, kShardAlignElements);
            std::vector<float> out(stage < 2 ? total : shard.count);
            if (callerOutput) o.output = out.data();
            const BucketerMemory want = bucketerMemory(planGradientBuckets(kNumels, 100), stage, overlap,
                                                       DType::F32, callerOutput, world, me);
            auto charged = [&] { return ledger.get(MemTag::CommBuckets, kBucketMemoryPlace).current; };
            GradientBucketer bucketer(comm, kNumels, o);
            bad[static_cast<std::size_t>(me)] += charged() != want.buffers;
            std::vector<float> g(300, 1.f);
            for (int pass = 0; pass < 3; ++pass) {
              bucketer.beginBackward(/*accumulate=*/pass > 0);
              for (std::size_t t = kNumels.size(); t-- > 0;) bucketer.gradientReady(t, g.data());
              bucketer.finishBackward();
              bad[static_cast<std::size_t>(me)] += charged() != want.buffers + (pass > 0 ? want.accumulation : 0);
            }
          });
          for (int b : bad) CHECK(b == 0);
        }
      }
    }
  }
}

TEST_CASE("a tensor never reported is named by finishBackward") {
  std::atomic<int> named{0};
  ThreadWorld::run(2, [&](Communicator& comm) {
    GradientBucketerOptions o;
    o.stage = 2;
    o.reduceBucketSize = 100;
    o.overlapComm = true;
    GradientBucketer bucketer(comm, kNumels, o);
    bucketer.beginBackward();
    std::vector<float> g(300, 1.f);
    for (std::size_t t = kNumels.size(); t-- > 0;)
      if (t != 4) bucketer.gradientReady(t, g.data());
    try {
      bucketer.finishBackward();
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("never reported ready (4)") != std::string::npos) ++named;
    }
    CHECK_THROWS_AS(bucketer.gradientReady(3, g.data()), InvalidArgument);  // not in a backward
  });
  CHECK(named == 2);
}

TEST_CASE("averaging over accumulation steps divides by world * steps") {
  ThreadWorld::run(3, [&](Communicator& comm) {
    GradientBucketerOptions o;
    o.gradientAccumulationSteps = 4;
    o.averageOverAccumulation = true;
    const std::vector<std::size_t> numels = {6};
    GradientBucketer bucketer(comm, numels, o);
    CHECK(bucketer.divisor() == 12.f);
    std::vector<float> g(6, 4.f);
    bucketer.beginBackward();
    bucketer.gradientReady(0, g.data());
    bucketer.finishBackward();
    const float* out = static_cast<const float*>(bucketer.output());
    for (int i = 0; i < 6; ++i) CHECK(out[i] == 1.f);  // 3 ranks * 4 / 12
  });
}

TEST_CASE("options come from the ZeRO config section") {
  ZeroConfig z;
  z.stage = 2;
  z.reduce_bucket_size = 1234;
  z.allgather_bucket_size = 777;
  z.stage3_prefetch_bucket_size = 55;
  z.overlap_comm = true;
  z.contiguous_gradients = false;
  const auto g = GradientBucketerOptions::fromZeroConfig(z, DType::BF16);
  CHECK(g.stage == 2);
  CHECK(g.reduceBucketSize == 1234);
  CHECK(g.overlapComm);
  CHECK(!g.contiguousGradients);
  CHECK(g.dtype == DType::BF16);
  CHECK(AllGatherBucketerOptions::fromZeroConfig(z, DType::F32).allgatherBucketSize == 777);
  z.stage = 3;
  CHECK(AllGatherBucketerOptions::fromZeroConfig(z, DType::F32).allgatherBucketSize == 55);
  z.stage3_prefetch_bucket_size = 0;  // no prefetch: each parameter gathered on its own
  CHECK(AllGatherBucketerOptions::fromZeroConfig(z, DType::F32).allgatherBucketSize ==
        kOneItemPerBucket);
}

TEST_CASE("all-gather bucketer rebuilds flat buffers and many small items") {
  const std::vector<std::size_t> items = {1000, 1, 0, 17, 5, 333};
  for (int world : {1, 2, 3, 4}) {
    for (bool overlap : {false, true}) {
      for (std::size_t cap : {kOneItemPerBucket, std::size_t{1}, std::size_t{40}, std::size_t{512},
                              std::size_t{1} << 20}) {
        CAPTURE(world);
        CAPTURE(overlap);
        CAPTURE(cap);
        std::vector<int> bad(static_cast<std::size_t>(world), 0);
        ThreadWorld::run(world, [&](Communicator& comm) {
          const int me = comm.rank();
          AllGatherBucketerOptions o;
          o.allgatherBucketSize = cap;
          o.overlapComm = overlap;
          o.dtype = DType::F16;
          o.shardAlignElements = 2;
          AllGatherBucketer ag(comm, items, o);
          std::vector<Buf> shards, fulls;
          for (std::size_t i = 0; i < items.size(); ++i) {
            const ShardRange s = shardOf(items[i], world, me, 2);
            shards.emplace_back(DType::F16, s.count);
            for (std::size_t e = 0; e < s.count; ++e)
              shards.back().set(e, e < s.valid ? test::exactValue(static_cast<int>(i), s.begin + e) : 0.f);
            fulls.emplace_back(DType::F16, s.count * static_cast<std::size_t>(world), -5.f);
          }
          std::vector<const void*> sp;
          std::vector<void*> fp;
          for (auto& s : shards) sp.push_back(s.data());
          for (auto& f : fulls) fp.push_back(f.data());
          ag.start(sp, fp);
          ag.waitBucket(ag.lastBucketOf(0));  // item 0 usable before the rest
          ag.finish();
          for (std::size_t i = 0; i < items.size(); ++i)
            for (std::size_t e = 0; e < items[i]; ++e)
              bad[static_cast<std::size_t>(me)] +=
                  fulls[i].get(e) != test::exactValue(static_cast<int>(i), e);
          // In place: the shard inside the full buffer (stage 1/2 layout).
          Buf full(DType::F16, fulls[0].size(), 0.f);
          const ShardRange s0 = shardOf(items[0], world, me, 2);
          std::memcpy(full.bytes.data() + s0.begin * 2, shards[0].data(), s0.count * 2);
          AllGatherBucketer one(comm, std::vector<std::size_t>{items[0]}, o);
          const void* shardInFull = full.bytes.data() + s0.begin * 2;
          void* fullPtr = full.data();
          one.start(std::span<const void* const>(&shardInFull, 1), std::span<void* const>(&fullPtr, 1));
          one.finish();
          for (std::size_t e = 0; e < items[0]; ++e)
            bad[static_cast<std::size_t>(me)] += full.get(e) != test::exactValue(0, e);
        });
        for (int b : bad) CHECK(b == 0);
      }
    }
  }
}
