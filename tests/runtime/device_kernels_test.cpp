// The runtime's device kernels (core/elementwise.h through runtime/device_kernels.h), each run on
// the host device and on the strict device with its streams delayed, against the runtime's
// existing host code: the Adam/AdamW step against optim::adamStep, the SGD step (momentum,
// dampening, Nesterov, weight decay) against optim::sgdStep, the norm's partial sums
// against normPart, accumulation against sumPair, widenInto and addDivided, averaging against
// divideBy, and scaling and the unscale with its overflow flag against the fp32 formula. Every
// comparison is of bits, so host and host-strict are also bit-identical to each other. Sizes: 0,
// 1, odd, and over one 64 Ki chunk of the norm. Where a GPU answers, the cuda device is held to
// the same bits.
#include "runtime/device_kernels.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/element_arithmetic.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/strict_device.h"
#include "runtime/grad_norm.h"
#include "runtime/optim/adam.h"
#include "runtime/optim/sgd.h"

using namespace zrt;

namespace {

const std::size_t kSizes[] = {0, 1, 7, 1001, 3 * kSumSquaresChunk + 5};
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

std::vector<float> randomFloats(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::vector<float> v(n);
  std::uint32_t x = seed;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = lo + (hi - lo) * static_cast<float>(x >> 8) / static_cast<float>(1u << 24);
  }
  return v;
}

// n elements of type t holding `values` rounded once.
std::vector<std::uint8_t> typed(DType t, const std::vector<float>& values) {
  std::vector<std::uint8_t> out(values.size() * dtypeSize(t));
  for (std::size_t i = 0; i < values.size(); ++i) storeElement(t, out.data(), i, values[i]);
  return out;
}

// The devices every kernel runs on: host, and host-strict with each stream task delayed, so a
// launch that ran ahead of the copies that feed it would read the memset's garbage.
// Where a GPU answers, the CUDA device too: its __global__ kernel must store the same bits.
struct Devices {
  MemoryLedger ledger;
  std::unique_ptr<Device> host, strict, cuda;
  Devices() {
    ::setenv("ZRT_STRICT_STREAM_DELAY_US", "100", 1);
    host = makeDevice("host:256M", ledger);
    strict = makeDevice("host-strict:256M", ledger);
    REQUIRE(static_cast<StrictDevice&>(*strict).streamDelay().count() == 100);
    if (cudaDeviceAvailable()) cuda = makeDevice("cuda:0", ledger);
  }
  std::vector<Device*> all() const {
    std::vector<Device*> out{host.get(), strict.get()};
    if (cuda) out.push_back(cuda.get());
    return out;
  }
};

// Host bytes on the device: allocated, filled with garbage first, then the bytes copied up.
DeviceMemory upload(Device& d, Stream& s, const void* bytes, std::size_t n) {
  DeviceMemory m = d.allocate(std::max<std::size_t>(n, 1), MemTag::Other);
  d.memsetAsync(m.data(), 0xcd, m.bytes(), s);
  if (n) d.copyAsync(m.data(), bytes, n, s);
  return m;
}

std::vector<std::uint8_t> download(Device& d, Stream& s, const DeviceMemory& m, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  if (n) d.copyAsync(out.data(), m.data(), n, s);
  s.synchronize();
  return out;
}

template <class T>
std::vector<std::uint8_t> bytesOf(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("the Adam/AdamW step launched gives optim::adamStep's bits, on host and host-strict") {
  Devices devs;
  for (Device* dev : devs.all())
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}})
      for (const DType gt : kTypes)
        for (const int mode : {0, 1, 2})
          for (const int copy : {-1, 0, 1, 2}) {
            CAPTURE(dev->name());
            CAPTURE(n);
            CAPTURE(static_cast<int>(gt));
            CAPTURE(mode);
            CAPTURE(copy);
            optim::AdamHyper h;
            h.lr = 3e-3;
            h.weightDecay = mode == 0 ? 0.0 : 0.05;
            h.decoupledWeightDecay = mode == 2;
            h.step = 7;
            h.gradScale = 1.0 / 1024.0 * 0.75;
            std::vector<float> p = randomFloats(n, 1, -2, 2), m = randomFloats(n, 2, -0.1f, 0.1f),
                               v = randomFloats(n, 3, 0, 0.01f);
            const std::vector<std::uint8_t> g = typed(gt, randomFloats(n, 4, -3000, 3000));
            const DType ct = copy < 0 ? DType::F32 : static_cast<DType>(copy);
            std::vector<std::uint8_t> refCopy(n * dtypeSize(ct), 0);
            // The reference: the runtime's CPU Adam on host arrays.
            std::vector<float> rp = p, rm = m, rv = v;
            optim::AdamState rs{rp.data(), rm.data(), rv.data(),
                                g.data(),  gt,        copy < 0 ? nullptr : refCopy.data(),
                                ct,        n};
            optim::adamStep(h, rs);

            auto s = dev->createStream();
            DeviceMemory dp = upload(*dev, *s, p.data(), n * 4),
                         dm = upload(*dev, *s, m.data(), n * 4),
                         dv = upload(*dev, *s, v.data(), n * 4),
                         dg = upload(*dev, *s, g.data(), g.size()),
                         dc = upload(*dev, *s, refCopy.data(), refCopy.size());
            optim::AdamState ds{dp.as<float>(),
                                dm.as<float>(),
                                dv.as<float>(),
                                dg.data(),
                                gt,
                                copy < 0 ? nullptr : dc.data(),
                                ct,
                                n};
            // Two launches over halves: a sub-range gives the whole's bits, as with the swapper.
            launchAdamStep(*dev, *s, h, ds, 0, n / 2);
            launchAdamStep(*dev, *s, h, ds, n / 2, n - n / 2);
            CHECK(download(*dev, *s, dp, n * 4) == bytesOf(rp));
            CHECK(download(*dev, *s, dm, n * 4) == bytesOf(rm));
            CHECK(download(*dev, *s, dv, n * 4) == bytesOf(rv));
            if (copy >= 0) CHECK(download(*dev, *s, dc, refCopy.size()) == refCopy);
          }
}

TEST_CASE("the SGD step launched gives optim::sgdStep's bits, on host and host-strict") {
  Devices devs;
  struct Variant {
    double momentum, dampening, weightDecay;
    bool nesterov;
    std::int64_t step;  // 1: the momentum buffer starts as the gradient
  };
  const Variant variants[] = {{0.0, 0.0, 0.0, false, 3},   {0.0, 0.0, 0.05, false, 3},
                              {0.9, 0.0, 0.0, false, 1},   {0.9, 0.1, 0.05, false, 4},
                              {0.9, 0.0, 0.05, true, 4}};
  for (Device* dev : devs.all())
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}})
      for (const DType gt : kTypes)
        for (const Variant& w : variants)
          for (const int copy : {-1, 0, 2}) {
            CAPTURE(dev->name());
            CAPTURE(n);
            CAPTURE(static_cast<int>(gt));
            CAPTURE(w.momentum);
            CAPTURE(w.nesterov);
            CAPTURE(w.step);
            CAPTURE(copy);
            optim::SgdHyper h;
            h.lr = 0.05;
            h.momentum = w.momentum;
            h.dampening = w.dampening;
            h.weightDecay = w.weightDecay;
            h.nesterov = w.nesterov;
            h.step = w.step;
            h.gradScale = 1.0 / 1024.0 * 0.75;
            std::vector<float> p = randomFloats(n, 5, -2, 2), buf = randomFloats(n, 6, -0.1f, 0.1f);
            const std::vector<std::uint8_t> g = typed(gt, randomFloats(n, 7, -3000, 3000));
            const DType ct = copy < 0 ? DType::F32 : static_cast<DType>(copy);
            std::vector<std::uint8_t> refCopy(n * dtypeSize(ct), 0);
            // The reference: the runtime's CPU SGD on host arrays.
            std::vector<float> rp = p, rb = buf;
            optim::SgdState rs{rp.data(), rb.data(), g.data(), gt,
                               copy < 0 ? nullptr : refCopy.data(), ct, n};
            optim::sgdStep(h, rs);

            auto s = dev->createStream();
            DeviceMemory dp = upload(*dev, *s, p.data(), n * 4),
                         db = upload(*dev, *s, buf.data(), n * 4),
                         dg = upload(*dev, *s, g.data(), g.size()),
                         dc = upload(*dev, *s, refCopy.data(), refCopy.size());
            optim::SgdState ds{dp.as<float>(), db.as<float>(), dg.data(), gt,
                               copy < 0 ? nullptr : dc.data(), ct, n};
            launchSgdStep(*dev, *s, h, ds, 0, n / 2);
            launchSgdStep(*dev, *s, h, ds, n / 2, n - n / 2);
            CHECK(download(*dev, *s, dp, n * 4) == bytesOf(rp));
            CHECK(download(*dev, *s, db, n * 4) == bytesOf(rb));
            if (copy >= 0) CHECK(download(*dev, *s, dc, refCopy.size()) == refCopy);
          }
}

TEST_CASE("the norm's partial sums launched give normPart's bits, inf and NaN included") {
  Devices devs;
  for (Device* dev : devs.all())
    for (const std::size_t n : kSizes)
      for (const DType t : kTypes)
        for (const float poison : {0.0f, std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()}) {
          CAPTURE(dev->name());
          CAPTURE(n);
          CAPTURE(static_cast<int>(t));
          CAPTURE(poison);
          std::vector<float> x = randomFloats(n, 11, -100, 100);
          if (n && poison != 0) x[n - 1 - n / 3] = poison;
          const std::vector<std::uint8_t> bytes = typed(t, x);
          const NormPart want = normPart(t, bytes.data(), n);
          auto s = dev->createStream();
          DeviceMemory d = upload(*dev, *s, bytes.data(), bytes.size());
          DeviceNormPart part(*dev, n);
          part.launch(*s, t, d.data(), n);
          const NormPart got = part.take(*s);
          CHECK(std::memcmp(&got.sumSq, &want.sumSq, sizeof(double)) == 0);
          CHECK(got.nonFinite == want.nonFinite);
          CHECK(got.nonFinite == (poison != 0 && n ? 1.0 : 0.0));
        }
}

TEST_CASE("accumulate, average and scale launched give element_arithmetic's bits") {
  Devices devs;
  for (Device* dev : devs.all())
    for (const std::size_t n : kSizes)
      for (const DType t : kTypes) {
        CAPTURE(dev->name());
        CAPTURE(n);
        CAPTURE(static_cast<int>(t));
        const std::vector<std::uint8_t> a = typed(t, randomFloats(n, 21, -5, 5));
        const std::vector<std::uint8_t> b = typed(t, randomFloats(n, 22, -5, 5));
        const std::vector<float> acc = randomFloats(n, 23, -50, 50);
        const std::size_t bytes = a.size();
        auto s = dev->createStream();

        std::vector<std::uint8_t> sum = b;  // sumPair: b += a, the collectives' reduction
        sumPair(t, a.data(), sum.data(), n);
        DeviceMemory da = upload(*dev, *s, a.data(), bytes), db = upload(*dev, *s, b.data(), bytes);
        dev->launch(unaryArgs(ElementwiseOp::Add, t, db.data(), t, da.data(), n), *s);
        CHECK(download(*dev, *s, db, bytes) == sum);

        std::vector<float> wide = acc;  // widenInto(add): micro-steps summed in fp32
        widenInto(t, a.data(), wide.data(), n, /*add=*/true);
        DeviceMemory dacc = upload(*dev, *s, acc.data(), n * 4);
        dev->launch(unaryArgs(ElementwiseOp::Add, DType::F32, dacc.data(), t, da.data(), n), *s);
        CHECK(download(*dev, *s, dacc, n * 4) == bytesOf(wide));

        std::vector<std::uint8_t> avg = a;  // divideBy: the average over 3 ranks
        divideBy(t, avg.data(), n, 3.0f);
        DeviceMemory dv = upload(*dev, *s, a.data(), bytes);
        dev->launch(unaryArgs(ElementwiseOp::Divide, t, dv.data(), t, dv.data(), n, 3.0f), *s);
        CHECK(download(*dev, *s, dv, bytes) == avg);

        std::vector<std::uint8_t> addDiv = b;  // addDivided: an averaged micro-step into a shard
        addDivided(t, addDiv.data(), a.data(), n, 3.0f);
        DeviceMemory dad = upload(*dev, *s, b.data(), bytes);
        dev->launch(unaryArgs(ElementwiseOp::AddDivided, t, dad.data(), t, da.data(), n, 3.0f), *s);
        CHECK(download(*dev, *s, dad, bytes) == addDiv);

        const float k = 0.3f;  // scaling: one fp32 multiply, one rounding to the type
        std::vector<float> scaled(n);
        for (std::size_t i = 0; i < n; ++i) scaled[i] = loadElement(t, a.data(), i) * k;
        DeviceMemory ds = upload(*dev, *s, a.data(), bytes);
        DeviceMemory dOut = dev->allocate(std::max<std::size_t>(n * 4, 1), MemTag::Other);
        dev->launch(unaryArgs(ElementwiseOp::Scale, DType::F32, dOut.data(), t, ds.data(), n, k),
                    *s);
        CHECK(download(*dev, *s, dOut, n * 4) == bytesOf(scaled));
      }
}

TEST_CASE(
    "unscale launched: the fp32 formula's bits, and the flag set exactly when an element is "
    "inf or NaN") {
  Devices devs;
  for (Device* dev : devs.all())
    for (const std::size_t n : kSizes)
      for (const DType t : kTypes)
        for (const float poison : {0.0f, -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()}) {
          CAPTURE(dev->name());
          CAPTURE(n);
          CAPTURE(static_cast<int>(t));
          CAPTURE(poison);
          std::vector<float> x = randomFloats(n, 31, -60000, 60000);
          if (n && poison != 0) x[n / 2] = poison;
          const std::vector<std::uint8_t> in = typed(t, x);
          const float multiplier = 1.0f / 65536.0f;
          std::vector<float> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = loadElement(t, in.data(), i) * multiplier;
          auto s = dev->createStream();
          DeviceMemory din = upload(*dev, *s, in.data(), in.size());
          DeviceMemory dout = dev->allocate(std::max<std::size_t>(n * 4, 1), MemTag::Other);
          DeviceMemory flag = dev->allocate(sizeof(std::int32_t), MemTag::Other);
          dev->memsetAsync(flag.data(), 0, flag.bytes(), *s);
          dev->launch(unscaleArgs(DType::F32, dout.data(), t, din.data(), n, multiplier,
                                  flag.as<std::int32_t>()),
                      *s);
          CHECK(download(*dev, *s, dout, n * 4) == bytesOf(want));
          std::int32_t f = -1;
          const std::vector<std::uint8_t> fb = download(*dev, *s, flag, sizeof f);
          std::memcpy(&f, fb.data(), sizeof f);
          CHECK(f == (poison != 0 && n ? 1 : 0));
        }
}

TEST_CASE("a launch with a buffer missing or past its allocation is refused before it runs") {
  Devices devs;
  auto s = devs.strict->createStream();
  DeviceMemory small = devs.strict->allocate(64, MemTag::Other);
  // 16 floats fit; 17 run past the 64-byte allocation: the strict device names the overrun.
  CHECK_THROWS_WITH_AS(devs.strict->launch(unaryArgs(ElementwiseOp::Scale, DType::F32, small.data(),
                                                     DType::F32, small.data(), 17, 2.0f),
                                           *s),
                       doctest::Contains("runs past the end of a 64-byte device allocation"),
                       InvalidArgument);
  auto hs = devs.host->createStream();
  CHECK_THROWS_WITH_AS(
      devs.host->launch(
          unscaleArgs(DType::F32, small.data(), DType::F32, small.data(), 4, 1.0f, nullptr), *hs),
      doctest::Contains("unscale of 4 elements: no overflow flag buffer"), InvalidArgument);
  s->synchronize();
}
