// The bucketers on a device whose memory the CPU cannot touch (tests/support/guarded_device.h),
// through the staged communicator, as they run on a GPU: gradients, the output and the shards
// live in device memory, so any copy or average the bucketer did with the CPU would fault. The
// same runs on HostDevice, whose streams are threads, so work used before its fence would give
// wrong bytes there. Each result must equal, bit for bit, the same bucketer on plain host memory
// (bucketer_test.cpp checks that one against an unbucketed all-reduce).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "comm/allgather_bucketer.h"
#include "comm/gradient_bucketer.h"
#include "comm/staged_communicator.h"
#include "comm/threads/thread_world.h"
#include "core/host_device.h"
#include "core/shard.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/guarded_device.h"

using namespace zrt;
using namespace zrt::comm;
using test::Buf;
using test::GuardedDevice;

namespace {

const std::vector<std::size_t> kDeviceNumels = {7, 0, 96, 1, 40, 130, 3, 19};
constexpr int kPasses = 3;

Buf deviceGradient(DType dt, int rank, std::size_t t, int pass) {
  Buf g(dt, kDeviceNumels[t]);
  for (std::size_t i = 0; i < g.size(); ++i)
    g.set(i, test::randomValue(rank * 31 + pass, t * 1000 + i, dt));
  return g;
}

// Device memory holding `host`'s bytes, and back: the test's own copies, through a stream of
// its own.
DeviceMemory onDevice(Device& device, const Buf& host) {
  DeviceMemory m = device.allocate(host.bytes.size(), MemTag::Other);
  auto stream = device.createStream();
  if (!host.bytes.empty()) device.copyAsync(m.data(), host.data(), host.bytes.size(), *stream);
  stream->synchronize();
  return m;
}

Buf fromDevice(Device& device, const void* src, DType dtype, std::size_t count) {
  Buf b(dtype, count);
  auto stream = device.createStream();
  if (count) device.copyAsync(b.data(), src, b.bytes.size(), *stream);
  stream->synchronize();
  return b;
}

// Each device a test runs the bucketers on: the guarded one (where memory is touched) and the
// host device (the ordering of work on real stream threads).
enum class Kind { Guarded, Host };
std::unique_ptr<Device> makeTestDevice(Kind kind, MemoryLedger& ledger) {
  if (kind == Kind::Guarded) return std::make_unique<GuardedDevice>(ledger);
  return std::make_unique<HostDevice>(ledger, std::uint64_t{1} << 30);
}

struct DeviceCase {
  int stage;
  bool overlap;
  bool contiguous;
  std::size_t bucket;
};

// The output() of kPasses backward passes (accumulating after the first) with `options`, the
// gradients arriving in reverse order; on `device` through `comm` when given, else host memory.
Buf reduce(Communicator& comm, GradientBucketerOptions o, Device* device) {
  const int me = comm.rank();
  const std::size_t total = std::accumulate(kDeviceNumels.begin(), kDeviceNumels.end(), std::size_t{0});
  const std::size_t outCount =
      o.stage < 2 ? total : shardOf(total, comm.size(), me, o.shardAlignElements).count;
  Buf out(o.dtype, outCount);
  DeviceMemory outDev;
  if (device) {
    outDev = onDevice(*device, out);
    o.output = outDev.data();
    o.device = device;
  } else {
    o.output = out.data();
  }
  GradientBucketer bucketer(comm, kDeviceNumels, o);
  for (int pass = 0; pass < kPasses; ++pass) {
    bucketer.beginBackward(/*accumulate=*/pass > 0);
    std::vector<Buf> host;
    std::vector<DeviceMemory> dev;
    for (std::size_t t = 0; t < kDeviceNumels.size(); ++t) {
      host.push_back(deviceGradient(o.dtype, me, t, pass));
      if (device) dev.push_back(onDevice(*device, host.back()));
    }
    for (std::size_t t = kDeviceNumels.size(); t-- > 0;)
      bucketer.gradientReady(t, device ? dev[t].data() : host[t].data());
    bucketer.finishBackward();
  }
  // output(), not the caller's buffer: at stages 0/1 an accumulated result is the bucketer's own.
  if (!device) {
    Buf result(o.dtype, bucketer.outputCount());
    if (!result.bytes.empty()) std::memcpy(result.data(), bucketer.output(), result.bytes.size());
    return result;
  }
  return fromDevice(*device, bucketer.output(), o.dtype, bucketer.outputCount());
}

}  // namespace

TEST_CASE("the guard works: a direct CPU read of the device's memory ends the process") {
  MemoryLedger ledger;
  GuardedDevice device(ledger);
  DeviceMemory m = device.allocate(64, MemTag::Other);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    volatile const char* p = m.as<char>();
    const char c = p[3];  // faults: the handler exits with kGuardViolationExit
    ::_exit(c == 0 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == test::kGuardViolationExit);
  // Through the device it is readable.
  char back[64];
  device.download(back, m.data(), sizeof back);
  CHECK(device.operations() > 0);
}

TEST_CASE("gradient bucketer on a device the CPU cannot touch equals the host-memory bucketer") {
  const std::vector<DeviceCase> cases = {{0, false, true, 100}, {1, true, true, 64},  {1, true, false, 1},
                                   {2, true, true, 100},  {2, false, true, 40}, {2, true, false, 7},
                                   {3, true, true, 1000}, {3, false, false, 90}};
  for (int world : {1, 2, 3}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (const DeviceCase& c : cases) {
        for (Kind kind : {Kind::Guarded, Kind::Host}) {
          CAPTURE(kind == Kind::Guarded ? "guarded" : "host");
          CAPTURE(world);
          CAPTURE(nameOf(dt));
          CAPTURE(c.stage);
          CAPTURE(c.overlap);
          CAPTURE(c.contiguous);
          std::vector<int> bad(static_cast<std::size_t>(world), 0);
          ThreadWorld::run(world, [&](Communicator& host) {
            GradientBucketerOptions o;
            o.stage = c.stage;
            o.reduceBucketSize = c.bucket;
            o.overlapComm = c.overlap;
            o.contiguousGradients = c.contiguous;
            o.dtype = dt;
            const Buf want = reduce(host, o, nullptr);
            MemoryLedger ledger;
            auto device = makeTestDevice(kind, ledger);
            Buf got;
            {
              StagedCommunicator staged(*device, host);
              o.ledger = &ledger;
              got = reduce(staged, o, device.get());
            }
            auto& b = bad[static_cast<std::size_t>(host.rank())];
            b += got.bytes != want.bytes;
            // The accumulation memory was the device's (charged there), now freed with the rest.
            b += ledger.get(MemTag::CommBuckets, MemPlace::Device).peak == 0 && c.stage >= 2 &&
                 world > 1;
            b += ledger.get(MemTag::CommBuckets, MemPlace::Device).current != 0;
          });
          for (int b : bad) CHECK(b == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "all-gather bucketer on a device the CPU cannot touch packs through the device, reusing "
    "its buffers") {
  const std::vector<std::size_t> items = {300, 1, 0, 17, 5, 64};
  for (int world : {1, 2, 3}) {
    for (bool overlap : {false, true}) {
      for (std::size_t cap : {kOneItemPerBucket, std::size_t{40}, std::size_t{1} << 20}) {
        for (Kind kind : {Kind::Guarded, Kind::Host}) {
          CAPTURE(kind == Kind::Guarded ? "guarded" : "host");
          CAPTURE(world);
          CAPTURE(overlap);
          CAPTURE(cap);
          std::vector<int> bad(static_cast<std::size_t>(world), 0);
          ThreadWorld::run(world, [&](Communicator& host) {
            const int me = host.rank();
            MemoryLedger ledger;
            auto dev = makeTestDevice(kind, ledger);
            Device& device = *dev;
            StagedCommunicator comm(device, host);
            AllGatherBucketerOptions o;
            o.allgatherBucketSize = cap;
            o.overlapComm = overlap;
            o.dtype = DType::BF16;
            o.device = &device;
            o.ledger = &ledger;
            AllGatherBucketer ag(comm, items, o);
            auto& b = bad[static_cast<std::size_t>(me)];
            // Pack buffers: allocated once, charged once, the same across rounds.
            const std::uint64_t pack = bucketPackBytes(ag.plan(), o.dtype);
            b += ledger.get(MemTag::CommBuckets, kBucketMemoryPlace).current != pack;
            b += cap == 40 && pack == 0;  // this cap coalesces the small items
            for (int round = 0; round < 2; ++round) {
              std::vector<DeviceMemory> shards, fulls;
              std::vector<const void*> sp;
              std::vector<void*> fp;
              for (std::size_t i = 0; i < items.size(); ++i) {
                const ShardRange s = shardOf(items[i], world, me, o.shardAlignElements);
                Buf shard(o.dtype, s.count);
                for (std::size_t e = 0; e < s.valid; ++e)
                  shard.set(e, test::exactValue(static_cast<int>(i) + round, s.begin + e));
                shards.push_back(onDevice(device, shard));
                fulls.push_back(onDevice(
                    device, Buf(o.dtype, s.count * static_cast<std::size_t>(world), -5.f)));
                sp.push_back(shards.back().data());
                fp.push_back(fulls.back().data());
              }
              ag.start(sp, fp);
              ag.finish();
              for (std::size_t i = 0; i < items.size(); ++i) {
                const Buf full = fromDevice(device, fulls[i].data(), o.dtype,
                                            fulls[i].bytes() / dtypeSize(o.dtype));
                for (std::size_t e = 0; e < items[i]; ++e)
                  b += full.get(e) != test::exactValue(static_cast<int>(i) + round, e);
              }
              b += ledger.get(MemTag::CommBuckets, kBucketMemoryPlace).peak != pack;
            }
          });
          for (int b : bad) CHECK(b == 0);
        }
      }
    }
  }
}
