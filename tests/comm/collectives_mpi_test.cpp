// Every collective, every dtype, sizes 0, 1, odd and several staging rounds, in place and out
// of place, equal and per-rank counts, through each path: MPI's collectives, the shared-memory
// path (a tiny staging area so large buffers take many rounds), and the hierarchical path
// (nodes simulated as pairs of ranks: 3 ranks make nodes of 2 and 1, 4 ranks two nodes of 2);
// the MPI and hierarchical paths also with MPI calls capped at 100 elements, as operations
// beyond MPI's int counts are split.
// Integer-valued inputs make every summation order exact, so results must match bit for bit;
// random inputs are checked against a float64 reference within the rounding bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <thread>

#include "comm/mpi/left_peers.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

namespace {

struct Variant {
  std::string name;
  CommOptions options;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  CommOptions mpi;
  mpi.path = CommPath::Mpi;
  CommOptions shm;
  shm.path = CommPath::Shm;
  shm.shmBytes = 4096;  // 2 KiB halves: 5003 fp32 elements take many rounds
  CommOptions hier = shm;
  hier.simulatedRanksPerNode = 2;
  // MPI calls of at most 100 elements: larger operations take the split that operations beyond
  // MPI's int counts take (pieces, rooted reduces and broadcasts).
  CommOptions mpiSplit = mpi;
  mpiSplit.maxMpiCount = 100;
  CommOptions hierSplit = hier;
  hierSplit.maxMpiCount = 100;
  for (auto* o : {&mpi, &shm, &hier, &mpiSplit, &hierSplit}) {
    o->timeout = std::chrono::seconds(60);
    o->checkConsistency = true;
  }
  v.push_back({"mpi", mpi});
  v.push_back({"shm", shm});
  v.push_back({"hier", hier});
  v.push_back({"mpi-split", mpiSplit});
  v.push_back({"hier-split", hierSplit});
  return v;
}

const std::size_t kSizes[] = {0, 1, 7, 1000, 5003};
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

// Uneven per-rank counts from a base size: rank r gets base + r (rank 1 gets none when base>0).
std::vector<std::size_t> unevenCounts(std::size_t base, int world) {
  std::vector<std::size_t> c(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) c[static_cast<std::size_t>(r)] = r == 1 ? 0 : base + static_cast<std::size_t>(r);
  return c;
}

// Runs body(comm, dtype, n) for every variant (one communicator each), dtype and size, with
// all three in the context of any failure.
template <class Body>
void forEachCase(Body body) {
  for (const Variant& v : variants()) {
    MpiCommunicator comm(MPI_COMM_WORLD, v.options);
    for (DType t : kTypes) {
      for (std::size_t n : kSizes) {
        CAPTURE(v.name);
        CAPTURE(nameOf(t));
        CAPTURE(n);
        body(comm, t, n);
      }
    }
  }
}

bool sameBits(const Buf& a, const Buf& b, std::size_t from, std::size_t n, std::size_t bFrom = 0) {
  const std::size_t es = dtypeSize(a.dtype);
  return n == 0 || std::equal(a.bytes.begin() + static_cast<long>(from * es),
                              a.bytes.begin() + static_cast<long>((from + n) * es),
                              b.bytes.begin() + static_cast<long>(bFrom * es));
}

}  // namespace

TEST_CASE("all-reduce matches the exact sum, in and out of place, every path and dtype") {
  const int world = test::worldSize(), me = test::worldRank();
  forEachCase([&](MpiCommunicator& comm, DType t, std::size_t n) {
    auto [in, expect] = test::exactData(t, n, me, world);
    const Buf inCopy = in;
    Buf out(t, n);
    comm.allReduce(in.data(), out.data(), n, t);
    CHECK(sameBits(out, expect, 0, n));
    CHECK(sameBits(in, inCopy, 0, n));  // out of place leaves the input alone
    comm.allReduce(in.data(), n, t);
    CHECK(sameBits(in, expect, 0, n));
  });
}

TEST_CASE("all-reduce of random values is within the rounding bound of a float64 reference") {
  const int world = test::worldSize(), me = test::worldRank();
  const std::size_t n = 4099;
  for (const Variant& v : variants()) {
    MpiCommunicator comm(MPI_COMM_WORLD, v.options);
    for (DType t : kTypes) {
      CAPTURE(v.name);
      CAPTURE(nameOf(t));
      Buf buf(t, n);
      for (std::size_t i = 0; i < n; ++i) buf.set(i, test::randomValue(me, i, t));
      comm.allReduce(buf.data(), n, t);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0, abs = 0;
        for (int r = 0; r < world; ++r) {
          exact += test::randomValue(r, i, t);
          abs += std::fabs(test::randomValue(r, i, t));
        }
        if (std::fabs(buf.get(i) - exact) > test::sumTolerance(t, world, abs, exact)) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("reduce-scatter with equal and per-rank counts, in and out of place") {
  const int world = test::worldSize(), me = test::worldRank();
  forEachCase([&](MpiCommunicator& comm, DType t, std::size_t base) {
    for (bool uneven : {false, true}) {
      CAPTURE(uneven);
      const auto counts = uneven ? unevenCounts(base, world) : equalCounts(base, world);
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      std::size_t off = 0;
      for (int r = 0; r < me; ++r) off += counts[static_cast<std::size_t>(r)];
      const std::size_t mine = counts[static_cast<std::size_t>(me)];
      const auto [in, expect] = test::exactData(t, total, me, world);
      Buf out(t, mine, -99.f);
      comm.reduceScatter(in.data(), out.data(), counts, t);
      CHECK(sameBits(out, expect, 0, mine, off));
      // In place: the result lands in this rank's segment; other segments stay as they were.
      Buf inPlace = in;
      comm.reduceScatter(inPlace.data(), inPlace.bytes.data() + off * dtypeSize(t), counts, t);
      CHECK(sameBits(inPlace, expect, off, mine, off));
      CHECK(sameBits(inPlace, in, 0, off));
      CHECK(sameBits(inPlace, in, off + mine, total - off - mine, off + mine));
    }
  });
}

TEST_CASE("all-gather with equal counts, per-rank counts at displacements, and in place") {
  const int world = test::worldSize(), me = test::worldRank();
  forEachCase([&](MpiCommunicator& comm, DType t, std::size_t base) {
    for (bool uneven : {false, true}) {
      CAPTURE(uneven);
      const auto counts = uneven ? unevenCounts(base, world) : equalCounts(base, world);
      // Uneven: segments in reverse rank order with a gap of 3 elements before each.
      std::vector<std::size_t> displs;
      std::size_t extent = 0;
      if (uneven) {
        displs.resize(static_cast<std::size_t>(world));
        for (int r = world - 1; r >= 0; --r) {
          displs[static_cast<std::size_t>(r)] = extent + 3;
          extent += 3 + counts[static_cast<std::size_t>(r)];
        }
      } else {
        extent = base * static_cast<std::size_t>(world);
      }
      auto displ = [&](int r) {
        return uneven ? displs[static_cast<std::size_t>(r)] : base * static_cast<std::size_t>(r);
      };
      const std::size_t mine = counts[static_cast<std::size_t>(me)];
      const Buf in = test::exactData(t, mine, me, world).in;
      Buf expect(t, extent, -7.f);
      for (int r = 0; r < world; ++r)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
          expect.set(displ(r) + i, test::exactValue(r, i));

      Buf out(t, extent, -7.f);
      comm.allGather(in.data(), out.data(), counts, t, displs);
      CHECK(sameBits(out, expect, 0, extent));

      Buf inPlace(t, extent, -7.f);
      std::copy(in.bytes.begin(), in.bytes.end(),
                inPlace.bytes.begin() + static_cast<long>(displ(me) * dtypeSize(t)));
      comm.allGather(inPlace.bytes.data() + displ(me) * dtypeSize(t), inPlace.data(), counts, t,
                     displs);
      CHECK(sameBits(inPlace, expect, 0, extent));
    }
  });
}

TEST_CASE("broadcast from the last rank and a barrier") {
  const int world = test::worldSize(), me = test::worldRank();
  for (int variant : {1, 3}) {  // shm (broadcast takes MPI) and MPI calls split at 100 elements
    const Variant v = variants()[static_cast<std::size_t>(variant)];
    CAPTURE(v.name);
    MpiCommunicator comm(MPI_COMM_WORLD, v.options);
    for (DType t : kTypes) {
      for (std::size_t n : kSizes) {
        Buf buf(t, n);
        for (std::size_t i = 0; i < n; ++i) buf.set(i, test::exactValue(me, i));
        comm.broadcast(buf.data(), n, t, world - 1);
        Buf expect(t, n);
        for (std::size_t i = 0; i < n; ++i) expect.set(i, test::exactValue(world - 1, i));
        CHECK(sameBits(buf, expect, 0, n));
      }
    }
    comm.barrier();
    CHECK(comm.stats().get(OpKind::Broadcast).calls == 15);
    CHECK(comm.stats().get(OpKind::Barrier).calls == 1);
  }
}

TEST_CASE("asynchronous operations complete in order and report their handles") {
  const int me = test::worldRank(), world = test::worldSize();
  MpiCommunicator comm(MPI_COMM_WORLD, variants()[1].options);
  // Large enough that each operation takes many rounds of the tiny staging area, so the polling
  // below sees the operations finish one by one.
  constexpr std::size_t n = std::size_t{1} << 16;
  std::vector<Buf> bufs;
  for (int k = 0; k < 6; ++k) {
    bufs.emplace_back(DType::F32, n);
    for (std::size_t i = 0; i < n; ++i) bufs.back().set(i, static_cast<float>(me + k));
  }
  std::vector<Work> works;
  for (auto& b : bufs) works.push_back(comm.allReduceAsync(b.data(), n, DType::F32));
  // Operations run one at a time in posting order (communicator.h), so whenever operation k is
  // complete, every earlier one is too. The handles are read from the last to the first: one
  // read later in time that finished earlier must read as complete.
  int outOfOrder = -1, partialStates = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (bool all = false; !all && std::chrono::steady_clock::now() < deadline;) {
    bool laterDone = false;
    int done = 0;
    for (int k = 5; k >= 0; --k) {
      const bool complete = works[static_cast<std::size_t>(k)].isCompleted();
      if (laterDone && !complete && outOfOrder < 0) outOfOrder = k;
      laterDone = laterDone || complete;
      done += complete ? 1 : 0;
    }
    all = done == 6;
    if (done > 0 && !all) ++partialStates;
    // Leave the cores to the progress threads: up to 4 ranks share 2 cores here.
    if (!all) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  waitAll(works);
  CHECK_MESSAGE(outOfOrder == -1, "operation " << outOfOrder + 1
                                               << " was still running after a later one completed");
  if (test::worldRank() == 0) {
    MESSAGE(partialStates << " polls saw some of the 6 operations complete and some running");
  }
  for (int k = 0; k < 6; ++k) {
    CHECK(works[static_cast<std::size_t>(k)].isCompleted());
    CHECK(!works[static_cast<std::size_t>(k)].exception());
    CHECK(bufs[static_cast<std::size_t>(k)].get(n - 1) ==
          static_cast<float>(world * (world - 1) / 2 + world * k));
  }
  CHECK(works[0].description().find("allReduce #1") != std::string::npos);
}

TEST_CASE("malformed operations are rejected before they are queued") {
  MpiCommunicator comm(MPI_COMM_WORLD, variants()[0].options);
  std::vector<float> a(8);
  std::vector<std::size_t> wrong(static_cast<std::size_t>(test::worldSize()) + 1, 1);
  CHECK_THROWS_AS(comm.reduceScatterAsync(a.data(), a.data() + 1, wrong, DType::F32), InvalidArgument);
  CHECK_THROWS_AS(comm.broadcastAsync(a.data(), 4, DType::F32, test::worldSize()), InvalidArgument);
  CHECK_THROWS_AS(comm.allReduceAsync(a.data(), a.data() + 1, 4, DType::F32), InvalidArgument);
  CHECK_THROWS_AS(comm.allReduceAsync(nullptr, 4, DType::F32), InvalidArgument);
  // Every rank throws before any collective call, so the world stays in step.
  CommOptions noCount = variants()[0].options;
  noCount.maxMpiCount = 0;
  CHECK_THROWS_AS(MpiCommunicator(MPI_COMM_WORLD, noCount), InvalidArgument);
}

TEST_CASE("the variants really take the paths they test") {
  const int world = test::worldSize();
  auto vs = variants();
  Collective big;
  big.kind = OpKind::AllReduce;
  big.count = 1 << 20;
  MpiCommunicator mpi(MPI_COMM_WORLD, vs[0].options);
  CHECK(mpi.pathFor(big) == CommPath::Mpi);
  MpiCommunicator shm(MPI_COMM_WORLD, vs[1].options);
  CHECK(shm.pathFor(big) == (world > 1 ? CommPath::Shm : CommPath::Mpi));
  CHECK(shm.numNodes() == (world > 1 ? 1 : world));
  MpiCommunicator hier(MPI_COMM_WORLD, vs[2].options);
  CHECK(hier.pathFor(big) == (world > 1 ? CommPath::Shm : CommPath::Mpi));
  if (world > 1) CHECK(hier.numNodes() == (world + 1) / 2);
  // Broadcast and barrier always use MPI; auto picks MPI below the size threshold.
  Collective bc;
  bc.kind = OpKind::Broadcast;
  bc.count = 1 << 20;
  CHECK(shm.pathFor(bc) == CommPath::Mpi);
  CommOptions autoOpts = vs[1].options;
  autoOpts.path = CommPath::Auto;
  autoOpts.shmMinBytes = 1 << 16;
  MpiCommunicator autoComm(MPI_COMM_WORLD, autoOpts);
  Collective small = big;
  small.count = 16;
  CHECK(autoComm.pathFor(small) == CommPath::Mpi);
  CHECK(autoComm.pathFor(big) == (world > 1 ? CommPath::Shm : CommPath::Mpi));
}

TEST_CASE("buffers in shared windows are read in place; mixed registration falls back") {
  const int world = test::worldSize(), me = test::worldRank();
  CommOptions o = variants()[1].options;  // shm, tiny staging
  MpiCommunicator comm(MPI_COMM_WORLD, o);
  for (DType t : kTypes) {
    for (std::size_t n : kSizes) {
      for (int mode = 0; mode < 2; ++mode) {  // 0: every rank registered; 1: only rank 0
        CAPTURE(nameOf(t));
        CAPTURE(n);
        CAPTURE(mode);
        const std::size_t es = dtypeSize(t), total = n * static_cast<std::size_t>(world);
        // Collective allocations, the same on every rank; mode 1 copies into plain memory.
        CommBuffer sendR = comm.allocateBuffer(total * es), recvR = comm.allocateBuffer(total * es);
        std::vector<char> sendP(total * es + 1), recvP(total * es + 1);
        const bool reg = mode == 0 || me == 0;
        char* send = reg ? sendR.as<char>() : sendP.data();
        char* recv = reg ? recvR.as<char>() : recvP.data();
        auto sum = [&](std::size_t i) { return Buf(t, 1, test::exactSum(world, i)).get(0); };
        int bad = 0;
        // all-reduce out of place and in place
        for (std::size_t i = 0; i < n; ++i) storeElement(t, send, i, test::exactValue(me, i));
        comm.allReduce(send, recv, n, t);
        for (std::size_t i = 0; i < n; ++i) bad += loadElement(t, recv, i) != sum(i);
        comm.allReduce(send, n, t);
        for (std::size_t i = 0; i < n; ++i) bad += loadElement(t, send, i) != sum(i);
        // reduce-scatter in place
        for (std::size_t i = 0; i < total; ++i) storeElement(t, send, i, test::exactValue(me, i));
        comm.reduceScatter(send, send + static_cast<std::size_t>(me) * n * es, n, t);
        for (std::size_t i = 0; i < n; ++i)
          bad += loadElement(t, send, static_cast<std::size_t>(me) * n + i) != sum(static_cast<std::size_t>(me) * n + i);
        // all-gather in place, then out of place
        for (std::size_t i = 0; i < n; ++i)
          storeElement(t, recv, static_cast<std::size_t>(me) * n + i, test::exactValue(me, i) + 1);
        comm.allGather(recv + static_cast<std::size_t>(me) * n * es, recv, n, t);
        for (int r = 0; r < world; ++r)
          for (std::size_t i = 0; i < n; ++i)
            bad += loadElement(t, recv, static_cast<std::size_t>(r) * n + i) != test::exactValue(r, i) + 1;
        for (std::size_t i = 0; i < n; ++i) storeElement(t, send, i, test::exactValue(me, i));
        comm.allGather(send, recv, n, t);
        for (int r = 0; r < world; ++r)
          for (std::size_t i = 0; i < n; ++i)
            bad += loadElement(t, recv, static_cast<std::size_t>(r) * n + i) != test::exactValue(r, i);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("a shared buffer may outlive the communicator that allocated it") {
  CommBuffer kept;
  {
    MpiCommunicator comm(MPI_COMM_WORLD, variants()[1].options);
    kept = comm.allocateBuffer(4096);
    CHECK(kept.bytes() == 4096);
    kept.as<char>()[4095] = 1;
  }
  CHECK(kept.as<char>()[4095] == 1);
  kept.reset();  // collective, like the allocation: every rank frees it here
}

TEST_CASE("a rank that arrives late at every shared-memory operation gets the same results") {
  // The last rank posts each operation 20 ms after the others, which meanwhile wait in the
  // shared-memory barriers (or, asynchronously, race ahead to the next operation's staging).
  const int world = test::worldSize(), me = test::worldRank();
  const bool late = me == world - 1;
  CommOptions o = variants()[1].options;  // shm, tiny staging: many rounds per operation
  MpiCommunicator comm(MPI_COMM_WORLD, o);
  const std::size_t n = 3001;
  CommBuffer shared = comm.allocateBuffer(n * 4);
  std::vector<Buf> staged(4, Buf(DType::F32, n));
  std::vector<Work> works;
  std::vector<std::function<int()>> checks;  // wrong elements of each staged buffer
  for (int k = 0; k < 4; ++k) {
    // Alternately the caller's memory (staging rounds) and a shared buffer (read in place).
    void* buf = k % 2 ? shared.data() : staged[static_cast<std::size_t>(k)].data();
    for (std::size_t i = 0; i < n; ++i) storeElement(DType::F32, buf, i, test::exactValue(me, i + k));
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    works.push_back(comm.allReduceAsync(buf, n, DType::F32));
    auto wrong = [buf, k, n, world] {
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        bad += loadElement(DType::F32, buf, i) != test::exactSum(world, i + k);
      return bad;
    };
    if (k % 2) {  // the shared buffer is reused by the next odd round: check it now
      works.back().wait();
      CHECK(wrong() == 0);
    } else {
      checks.push_back(wrong);
    }
  }
  waitAll(works);
  for (auto& wrong : checks) CHECK(wrong() == 0);
}

// A rank alone has no peers to leave: a communicator (and its shared-memory windows) torn down
// while an exception unwinds is freed as usual, with no "peers may still be in the collectives"
// warning and no grace at MPI_Finalize. On more ranks the skip is dead_rank_test.sh's subject.
TEST_CASE("a rank alone frees its communicator while an exception unwinds") {
  if (test::worldSize() != 1) return;  // decided by the world size before anything runs
  CommOptions shm;
  shm.path = CommPath::Shm;
  try {
    MpiCommunicator comm(MPI_COMM_WORLD, shm);
    throw InvalidArgument("a set-up error on one rank");
  } catch (const InvalidArgument&) {
  }
  CHECK_FALSE(leftPeers());
}
