// Device ranks over the MPI backend through pinned staging: buffers in (simulated) device
// memory, every collective, results as on the host, staging charged to the ledger. And the
// other way round: a backend that takes device memory only (NCCL's contract, tests/support/
// device_only_comm.h, on the strict device) handed device buffers as they are and host ones
// (pageable, pinned) through device staging.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "comm/mpi/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "core/host_device.h"
#include "core/strict_device.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/device_only_comm.h"
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

TEST_CASE("a device backend gets device memory only; host buffers go through device staging") {
  const int world = test::worldSize(), me = test::worldRank();
  MemoryLedger ledger;
  StrictDevice device(ledger, std::uint64_t{1} << 30, std::chrono::microseconds(50));
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  MpiCommunicator host(MPI_COMM_WORLD, o);
  test::DeviceOnlyComm backend(device, host);
  StagedCommunicator comm(device, backend);
  CHECK(comm.backendName() == "staged(device-only)");
  CHECK(comm.takesHostMemory());
  CHECK(comm.bufferPlace() == MemPlace::Device);
  {
    const std::uint64_t before = ledger.get(MemTag::CommBuckets, MemPlace::Device).current;
    CommBuffer b = comm.allocateBuffer(256);
    CHECK(device.isDeviceMemory(b.data(), 256));
    CHECK(ledger.get(MemTag::CommBuckets, MemPlace::Device).current == before + 256);
  }
  auto stream = device.createStream();
  auto copy = [&](void* dst, const void* src, std::size_t bytes) {
    device.copyAsync(dst, src, bytes, *stream);
    stream->synchronize();
  };
  const DType t = DType::F32;
  const std::size_t n = 1001, bytes = n * 4;
  const auto [in, expect] = test::exactData(t, n, me, world);
  std::vector<char> down(bytes);

  // Pageable host memory, in place.
  std::vector<char> pageable(in.bytes);
  comm.allReduce(pageable.data(), n, t);
  CHECK(std::memcmp(pageable.data(), expect.data(), bytes) == 0);
  // Pinned send, device receive: the input stays.
  DeviceMemory pinned = device.allocatePinned(bytes, MemTag::Other);
  DeviceMemory onDevice = device.allocate(bytes, MemTag::Gradients);
  std::memcpy(pinned.data(), in.data(), bytes);
  comm.allReduce(pinned.data(), onDevice.data(), n, t);
  copy(down.data(), onDevice.data(), bytes);
  CHECK(std::memcmp(down.data(), expect.data(), bytes) == 0);
  CHECK(std::memcmp(pinned.data(), in.data(), bytes) == 0);

  // A device full buffer reduce-scattered into a pinned shard, which is gathered back into it.
  const std::size_t per = 257, total = per * static_cast<std::size_t>(world);
  DeviceMemory full = device.allocate(total * 4, MemTag::Gradients);
  DeviceMemory shard = device.allocatePinned(per * 4, MemTag::Other);
  test::Buf f(t, total);
  for (std::size_t i = 0; i < total; ++i) f.set(i, test::exactValue(me, i));
  copy(full.data(), f.data(), total * 4);
  comm.reduceScatter(full.data(), shard.data(), per, t);
  int bad = 0;
  for (std::size_t i = 0; i < per; ++i)
    bad += loadElement(t, shard.data(), i) != test::exactSum(world, static_cast<std::size_t>(me) * per + i);
  CHECK(bad == 0);
  comm.allGather(shard.data(), full.data(), per, t);
  std::vector<char> gathered(total * 4);
  copy(gathered.data(), full.data(), gathered.size());
  for (std::size_t i = 0; i < total; ++i) bad += loadElement(t, gathered.data(), i) != test::exactSum(world, i);
  CHECK(bad == 0);
  // A broadcast into pageable memory, from the last rank.
  std::vector<char> cast(in.bytes);
  if (me != world - 1) std::fill(cast.begin(), cast.end(), 0);
  const test::Buf root = test::exactData(t, n, world - 1, world).in;
  if (me == world - 1) std::memcpy(cast.data(), root.data(), bytes);
  comm.broadcast(cast.data(), n, t, world - 1);
  CHECK(std::memcmp(cast.data(), root.data(), bytes) == 0);
  comm.barrier();
  // The backend carried every operation (it throws on host memory), and the staging was
  // device memory charged to the device.
  CHECK(backend.operations() == 6);
  CHECK(ledger.get(MemTag::CommBuckets, MemPlace::Device).peak >= 2 * bytes);

  // Host memory handed to the backend itself is refused by name, before any collective.
  std::string msg;
  try {
    backend.allReduce(pageable.data(), n, t);
  } catch (const InvalidArgument& e) {
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("device-only backend: allReduce's send buffer (4004 bytes") != std::string::npos);
  CHECK(msg.find("is not host-strict:0 memory") != std::string::npos);
}
