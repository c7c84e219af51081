// The NCCL backend on real GPUs (skipped, exit 77, without one): one rank per visible device,
// driven from threads of one process with a shared unique id. Every collective and dtype, per-
// rank counts, and the compute stream waiting on the communication stream.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "core/element_arithmetic.h"
#include "core/cuda/cuda_device.h"
#include "tests/comm/comm_test_util.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

namespace {

void runRanks(int world, const std::function<void(NcclCommunicator&, CudaDevice&, Stream&)>& body) {
  const ncclUniqueId id = NcclCommunicator::newUniqueId();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        MemoryLedger ledger;
        CudaDevice dev(ledger, r);
        auto compute = dev.createStream();
        NcclCommunicator comm(dev, *compute, id, r, world, std::chrono::seconds(60));
        body(comm, dev, *compute);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e.empty());
}

}  // namespace

TEST_CASE("NCCL collectives on every visible GPU") {
  const int world = cudaDeviceCount();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    runRanks(world, [&](NcclCommunicator& comm, CudaDevice& dev, Stream& compute) {
      const int me = comm.rank();
      const std::size_t n = 4099;
      const std::size_t es = dtypeSize(t);
      const auto [host, expect] = test::exactData(t, n, me, world);
      DeviceMemory d = dev.allocate(n * es, MemTag::Gradients);
      dev.copyAsync(d.data(), host.data(), n * es, compute);
      Work w = comm.allReduceAsync(d.data(), n, t);
      waitOnStream(w, compute);  // the copy back waits on the device, not on the host
      Buf back(t, n);
      dev.copyAsync(back.data(), d.data(), n * es, compute);
      compute.synchronize();
      CHECK(std::memcmp(back.data(), expect.data(), n * es) == 0);

      // Per-rank counts: reduce-scatter then all-gather at displacements.
      std::vector<std::size_t> counts(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) counts[static_cast<std::size_t>(r)] = 100 + static_cast<std::size_t>(r) * 7;
      std::size_t total = 0;
      for (std::size_t c : counts) total += c;
      DeviceMemory full = dev.allocate(total * es, MemTag::Gradients);
      DeviceMemory shard = dev.allocate(counts[static_cast<std::size_t>(me)] * es, MemTag::Gradients);
      Buf f(t, total);
      for (std::size_t i = 0; i < total; ++i) f.set(i, test::exactValue(me, i));
      dev.copyAsync(full.data(), f.data(), total * es, compute);
      comm.reduceScatter(full.data(), shard.data(), counts, t);
      comm.allGather(shard.data(), full.data(), counts, t);
      dev.copyAsync(f.data(), full.data(), total * es, compute);
      compute.synchronize();
      int bad = 0;
      for (std::size_t i = 0; i < total; ++i) bad += f.get(i) != Buf(t, 1, test::exactSum(world, i)).get(0);
      CHECK(bad == 0);
      // Broadcast from the last rank: every rank ends with its values.
      dev.copyAsync(d.data(), host.data(), n * es, compute);
      comm.broadcast(d.data(), n, t, world - 1);
      dev.copyAsync(back.data(), d.data(), n * es, compute);
      compute.synchronize();
      bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += back.get(i) != test::exactValue(world - 1, i);
      CHECK(bad == 0);
      comm.barrier();
    });
  }
}
