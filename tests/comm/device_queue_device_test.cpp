// DeviceQueue on a device whose memory the host cannot touch: the averaging kernels, launched
// through Device::launch, give the CPU kernels' bits for every dtype (sizes past one CUDA grid,
// so its grid-stride loop runs), and a stage 1/2 gradient bucketer on the device, through the
// staged communicator over ranks as threads, equals the same bucketer on host memory bit for
// bit: the bucketer never reads device memory from the host.
// Built twice (tests/comm/CMakeLists.txt): on the strict host device, its streams' tasks
// delayed, and with ZRT_TEST_DEVICE_SPEC "cuda:0" on a GPU, whose main exits 77 (skipped)
// without one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/device_queue.h"
#include "comm/gradient_bucketer.h"
#include "comm/staged_communicator.h"
#include "comm/threads/thread_world.h"
#include "core/element_arithmetic.h"
#include "core/shard.h"
#include "tests/comm/comm_test_util.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;

#ifndef ZRT_TEST_DEVICE_SPEC
#define ZRT_TEST_DEVICE_SPEC "host-strict:256M"
#endif

namespace {

constexpr const char* kDevice = ZRT_TEST_DEVICE_SPEC;

Buf randomBuf(DType dt, std::size_t n, int seed) {
  Buf b(dt, n);
  for (std::size_t i = 0; i < n; ++i) b.set(i, test::randomValue(seed, i, dt) * 100.f);
  return b;
}

DeviceMemory upload(Device& dev, Stream& s, const Buf& b) {
  DeviceMemory m = dev.allocate(b.bytes.size(), MemTag::Other);
  dev.copyAsync(m.data(), b.data(), b.bytes.size(), s);
  s.synchronize();
  return m;
}

Buf download(Device& dev, Stream& s, const DeviceMemory& m, DType dt) {
  Buf b(dt, m.bytes() / dtypeSize(dt));
  dev.copyAsync(b.data(), m.data(), m.bytes(), s);
  s.synchronize();
  return b;
}

}  // namespace

TEST_CASE("device averaging kernels: the CPU kernels' bits, every dtype") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "100", 1);
  MemoryLedger ledger;
  auto dev = makeDevice(kDevice, ledger);
  auto stream = dev->createStream();
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{4096 * 256 * 3 + 17}}) {
      CAPTURE(nameOf(dt));
      CAPTURE(n);
      const Buf a = randomBuf(dt, n, 1), b = randomBuf(dt, n, 2);
      Buf wantDiv = a, wantAdd = a;
      divideBy(dt, wantDiv.data(), n, 3.f);
      addDivided(dt, wantAdd.data(), b.data(), n, 6.f);
      DeviceMemory div = upload(*dev, *stream, a), add = upload(*dev, *stream, a),
                   src = upload(*dev, *stream, b);
      {
        DeviceQueue q(dev.get());
        q.divide(dt, div.data(), n, 3.f);
        q.addDivided(dt, add.data(), src.data(), n, 6.f);
        q.fence();
      }
      CHECK(download(*dev, *stream, div, dt).bytes == wantDiv.bytes);
      CHECK(download(*dev, *stream, add, dt).bytes == wantAdd.bytes);
    }
  }
}

TEST_CASE(
    "gradient bucketer on the device through the staged communicator equals host memory") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "100", 1);
  const std::vector<std::size_t> numels = {7, 0, 96, 1, 40, 130, 3, 19};
  for (int world : {1, 2, 3}) {
    for (int stage : {1, 2}) {
      CAPTURE(world);
      CAPTURE(stage);
      std::vector<int> bad(static_cast<std::size_t>(world), 0);
      ThreadWorld::run(world, [&](Communicator& host) {
        const int me = host.rank();
        std::size_t total = 0;
        for (std::size_t n : numels) total += n;
        const std::size_t outCount =
            stage < 2 ? total : shardOf(total, world, me, kShardAlignElements).count;
        GradientBucketerOptions o;
        o.stage = stage;
        o.reduceBucketSize = 64;
        o.overlapComm = true;
        o.dtype = DType::BF16;
        auto grads = [&](int pass) {
          std::vector<Buf> g;
          for (std::size_t t = 0; t < numels.size(); ++t)
            g.push_back(randomBuf(o.dtype, numels[t], me * 10 + pass + 7 * static_cast<int>(t)));
          return g;
        };
        // output(), not the caller's buffer: at stage 1 an accumulated result is the bucketer's.
        Buf want(o.dtype, outCount), wantOut(o.dtype, outCount);
        {
          GradientBucketerOptions h = o;
          h.output = want.data();
          GradientBucketer b(host, numels, h);
          for (int pass = 0; pass < 2; ++pass) {
            b.beginBackward(pass > 0);
            auto g = grads(pass);
            for (std::size_t t = numels.size(); t-- > 0;) b.gradientReady(t, g[t].data());
            b.finishBackward();
          }
          std::memcpy(wantOut.data(), b.output(), wantOut.bytes.size());
        }
        Buf got;
        MemoryLedger ledger;
        auto dev = makeDevice(kDevice, ledger);
        auto stream = dev->createStream();
        DeviceMemory out = upload(*dev, *stream, Buf(o.dtype, outCount));
        {
          StagedCommunicator staged(*dev, host);
          o.device = dev.get();
          o.output = out.data();
          GradientBucketer b(staged, numels, o);
          for (int pass = 0; pass < 2; ++pass) {
            b.beginBackward(pass > 0);
            auto g = grads(pass);
            std::vector<DeviceMemory> gd;
            for (const Buf& x : g) gd.push_back(upload(*dev, *stream, x));
            for (std::size_t t = numels.size(); t-- > 0;) b.gradientReady(t, gd[t].data());
            b.finishBackward();
          }
          got = Buf(o.dtype, outCount);
          dev->copyAsync(got.data(), b.output(), got.bytes.size(), *stream);
          stream->synchronize();
        }
        bad[static_cast<std::size_t>(me)] += got.bytes != wantOut.bytes;
      });
      for (int b : bad) CHECK(b == 0);
    }
  }
}
