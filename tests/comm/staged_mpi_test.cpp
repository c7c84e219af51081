// Device ranks over the MPI backend through pinned staging: buffers in (simulated) device
// memory, every collective, results as on the host, staging charged to the ledger.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "comm/mpi/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "core/host_device.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/mpi_test.h"

using namespace zrt;
using namespace zrt::comm;

TEST_CASE("device buffers through pinned staging give the host results") {
  const int world = test::worldSize(), me = test::worldRank();
  MemoryLedger ledger;
  HostDevice device(ledger, std::uint64_t{1} << 30);
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  MpiCommunicator host(MPI_COMM_WORLD, o);
  StagedCommunicator comm(device, host);
  CHECK(comm.backendName() == "staged(mpi)");
  const DType t = DType::BF16;
  const std::size_t n = 3001;
  DeviceMemory buf = device.allocate(n * 2, MemTag::Gradients);
  const auto [in, expect] = test::exactData(t, n, me, world);
  std::memcpy(buf.data(), in.data(), n * 2);
  comm.allReduce(buf.data(), n, t);
  CHECK(std::memcmp(buf.data(), expect.data(), n * 2) == 0);
  CHECK(ledger.get(MemTag::CommBuckets, MemPlace::PinnedHost).current >= n * 2);

  // reduce-scatter and all-gather round trip: the gathered shards are the all-reduced buffer
  const std::size_t per = 513, total = per * static_cast<std::size_t>(world);
  DeviceMemory full = device.allocate(total * 2, MemTag::Gradients);
  DeviceMemory shard = device.allocate(per * 2, MemTag::Gradients);
  test::Buf f(t, total);
  for (std::size_t i = 0; i < total; ++i) f.set(i, test::exactValue(me, i));
  std::memcpy(full.data(), f.data(), total * 2);
  comm.reduceScatter(full.data(), shard.data(), per, t);
  comm.allGather(shard.data(), full.data(), per, t);
  int bad = 0;
  for (std::size_t i = 0; i < total; ++i) bad += loadElement(t, full.data(), i) != test::exactSum(world, i);
  CHECK(bad == 0);
  // Out of place: the input stays, the sum lands in recv.
  DeviceMemory sum = device.allocate(n * 2, MemTag::Gradients);
  std::memcpy(buf.data(), in.data(), n * 2);
  comm.allReduce(buf.data(), sum.data(), n, t);
  CHECK(std::memcmp(sum.data(), expect.data(), n * 2) == 0);
  CHECK(std::memcmp(buf.data(), in.data(), n * 2) == 0);
  // Broadcast from the last rank: every rank ends with its inputs.
  comm.broadcast(buf.data(), n, t, world - 1);
  const test::Buf root = test::exactData(t, n, world - 1, world).in;
  CHECK(std::memcmp(buf.data(), root.data(), n * 2) == 0);
  comm.barrier();
  CHECK(comm.stats().get(OpKind::AllGather).calls == 1);
}
