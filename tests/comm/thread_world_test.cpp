// The ranks-as-threads backend: the same results as the MPI backend for every collective, and
// its fault behaviour (a rank that never arrives is named; mismatched operations are caught).
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "comm/threads/thread_world.h"
#include "core/error.h"
#include "tests/comm/comm_test_util.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

TEST_CASE("thread ranks: every collective on 1 to 4 ranks, zero and odd sizes") {
  for (int world : {1, 2, 3, 4}) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      for (std::size_t n : {0u, 1u, 7u, 1001u}) {
        CAPTURE(world);
        CAPTURE(nameOf(t));
        CAPTURE(n);
        std::vector<int> failures(static_cast<std::size_t>(world), 0);
        ThreadWorld::run(world, [&](Communicator& c) {
          const int me = c.rank();
          int& bad = failures[static_cast<std::size_t>(me)];
          // all-reduce in place
          auto [a, sum] = test::exactData(t, n, me, world);
          c.allReduce(a.data(), n, t);
          for (std::size_t i = 0; i < n; ++i) bad += a.get(i) != sum.get(i);
          // reduce-scatter, per-rank counts
          std::vector<std::size_t> counts(static_cast<std::size_t>(world));
          for (int r = 0; r < world; ++r) counts[static_cast<std::size_t>(r)] = n + static_cast<std::size_t>(r);
          const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
          std::size_t off = 0;
          for (int r = 0; r < me; ++r) off += counts[static_cast<std::size_t>(r)];
          const auto [in, sums] = test::exactData(t, total, me, world);
          Buf out(t, counts[static_cast<std::size_t>(me)]);
          c.reduceScatter(in.data(), out.data(), counts, t);
          for (std::size_t i = 0; i < out.size(); ++i) bad += out.get(i) != sums.get(off + i);
          // all-gather in place
          Buf g(t, total, -1.f);
          for (std::size_t i = 0; i < counts[static_cast<std::size_t>(me)]; ++i)
            g.set(off + i, test::exactValue(me, i));
          c.allGather(g.bytes.data() + off * dtypeSize(t), g.data(), counts, t);
          std::size_t at = 0;
          for (int r = 0; r < world; ++r)
            for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
              bad += g.get(at++) != Buf(t, 1, test::exactValue(r, i)).get(0);
          // broadcast
          Buf b(t, n, static_cast<float>(me));
          c.broadcast(b.data(), n, t, world - 1);
          for (std::size_t i = 0; i < n; ++i) bad += b.get(i) != static_cast<float>(world - 1);
          c.barrier();
        });
        for (int f : failures) CHECK(f == 0);
      }
    }
  }
}

TEST_CASE("thread ranks: a rank that never arrives is named in a TimeoutError") {
  std::string message;
  try {
    ThreadWorld::run(
        3,
        [](Communicator& c) {
          std::vector<float> v(8, 1.f);
          if (c.rank() != 2) c.allReduce(v.data(), 8, DType::F32);
        },
        std::chrono::milliseconds(200));
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("ranks that had not arrived: 2") != std::string::npos);
  // The failure names the operation as its handle does: kind, number, bytes, dtype.
  CHECK(message.find("allReduce #1 (32 B fp32, path threads): ") != std::string::npos);
}

TEST_CASE("thread ranks: mismatched operations fail on every rank") {
  std::atomic<int> peerErrors{0};
  ThreadWorld::run(2, [&](Communicator& c) {
    std::vector<float> v(8, 1.f);
    try {
      c.allReduce(v.data(), c.rank() == 0 ? 8 : 6, DType::F32);
    } catch (const PeerError& e) {
      if (std::string(e.what()).find("rank 1 posted allReduce 24 B") != std::string::npos) ++peerErrors;
    }
    c.allReduce(v.data(), 8, DType::F32);  // still usable afterwards
  });
  CHECK(peerErrors == 2);
}
