// The bucketers over real MPI ranks, through the MPI and shared-memory paths: integer-valued
// gradients make every summation order exact, so the bucketed result must equal an unbucketed
// all-reduce bit for bit.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/element_arithmetic.h"
#include "core/shard.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

TEST_CASE("bucketed reduction equals an unbucketed all-reduce over MPI ranks") {
  const int world = test::worldSize(), me = test::worldRank();
  const std::vector<std::size_t> numels = {1000, 3, 0, 4097, 12, 700, 1, 2500};
  const std::size_t total = std::accumulate(numels.begin(), numels.end(), std::size_t{0});
  for (CommPath path : {CommPath::Mpi, CommPath::Shm}) {
    CommOptions co;
    co.path = path;
    co.shmBytes = 8192;
    co.timeout = std::chrono::seconds(60);
    MpiCommunicator comm(MPI_COMM_WORLD, co);
    for (DType dt : {DType::F32, DType::F16}) {
      Buf flat(dt, total);
      for (std::size_t i = 0; i < total; ++i) flat.set(i, test::exactValue(me, i));
      Buf ref = flat;
      comm.allReduce(ref.data(), total, dt);
      divideBy(dt, ref.data(), total, static_cast<float>(world));
      for (int stage : {1, 2}) {
        for (bool overlap : {false, true}) {
          CAPTURE(nameOf(path));
          CAPTURE(nameOf(dt));
          CAPTURE(stage);
          CAPTURE(overlap);
          GradientBucketerOptions o;
          o.stage = stage;
          o.reduceBucketSize = 2048;
          o.overlapComm = overlap;
          o.dtype = dt;
          GradientBucketer b(comm, numels, o);
          b.beginBackward();
          for (std::size_t t = numels.size(); t-- > 0;)
            b.gradientReady(t, flat.bytes.data() + b.plan().offset[t] * dtypeSize(dt));
          b.finishBackward();
          const std::size_t es = dtypeSize(dt);
          if (stage < 2) {
            CHECK(std::memcmp(b.output(), ref.data(), total * es) == 0);
          } else {
            const ShardRange s = shardOf(total, world, me, kShardAlignElements);
            CHECK(std::memcmp(b.output(), ref.bytes.data() + s.begin * es, s.valid * es) == 0);
          }
        }
      }
      // All-gather bucketer: the averaged shards back into full buffers.
      AllGatherBucketerOptions ao;
      ao.allgatherBucketSize = 1500;
      ao.overlapComm = true;
      ao.dtype = dt;
      AllGatherBucketer ag(comm, std::vector<std::size_t>{total}, ao);
      const ShardRange s = shardOf(total, world, me, kShardAlignElements);
      Buf shard(dt, s.count), full(dt, s.count * static_cast<std::size_t>(world));
      std::memcpy(shard.data(), ref.bytes.data() + s.begin * dtypeSize(dt), s.valid * dtypeSize(dt));
      const void* sp = shard.data();
      void* fp = full.data();
      ag.start(std::span<const void* const>(&sp, 1), std::span<void* const>(&fp, 1));
      ag.finish();
      CHECK(std::memcmp(full.data(), ref.data(), total * dtypeSize(dt)) == 0);
    }
  }
}
