// Device kernels written once (core/elementwise.h) through Device::launch: fills and
// fp32 <-> fp16/bf16 casts on device memory give the bits of core/dtype.h's scalar conversions on
// the host device, and the same bits on the strict device (run on its streams' threads through
// the alias, with ZRT_STRICT_STREAM_DELAY_US set so a launch that ran ahead of its copies would
// read garbage).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/element_arithmetic.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/strict_device.h"

using namespace zrt;

namespace {

// fp32 inputs that reach every rounding case: ties, subnormals of each target, overflow, the
// largest finite values, infinities, NaNs, signed zeros, and a spread of ordinary bit patterns.
std::vector<float> inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 65519.99f, 1e-8f, -6e-8f,
                          5.96e-8f, 2.98e-8f, 6.1e-5f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(), 1.0009765625f, 1.00048828125f,
                          3.0517578125e-05f, 1.00390625f, 1.001953125f};
  std::uint32_t x = 12345;
  for (int i = 0; i < 997; ++i) {  // an odd count, so no launch is a multiple of anything
    x = x * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &x, sizeof f);
    v.push_back(f);
  }
  return v;
}

// One launch to compare: a cast from inType to outType, or a fill of outType with `value`.
struct Run {
  DType inType, outType;
  ElementwiseOp op;
  float value;
};

// On `dev`: copies `in` to device memory, launches, copies the output back; returns its bytes.
std::vector<std::uint8_t> run(Device& dev, const Run& r, const std::vector<std::uint8_t>& in,
                              std::size_t count) {
  auto stream = dev.createStream();
  DeviceMemory din = dev.allocate(count * dtypeSize(r.inType), MemTag::Other);
  DeviceMemory dout = dev.allocate(count * dtypeSize(r.outType), MemTag::Other);
  dev.memsetAsync(dout.data(), 0xab, dout.bytes(), *stream);
  dev.copyAsync(din.data(), in.data(), din.bytes(), *stream);
  if (r.op == ElementwiseOp::Fill)
    dev.launch(fillArgs(r.outType, dout.data(), count, r.value), *stream);
  else
    dev.launch(castArgs(r.outType, dout.data(), r.inType, din.data(), count), *stream);
  std::vector<std::uint8_t> out(dout.bytes());
  dev.copyAsync(out.data(), dout.data(), out.size(), *stream);
  stream->synchronize();
  return out;
}

}  // namespace

TEST_CASE("fills and casts: the host device gives dtype.h's bits, the strict device the same") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "200", 1);
  MemoryLedger ledger;
  auto host = makeDevice("host:64M", ledger);
  auto strict = makeDevice("host-strict:64M", ledger);
  REQUIRE(static_cast<StrictDevice&>(*strict).streamDelay().count() == 200);
  const std::vector<float> f32 = inputs();
  const std::size_t n = f32.size();
  for (DType in : {DType::F32, DType::F16, DType::BF16}) {
    // The source buffer in type `in`, narrowed from the fp32 inputs by dtype.h.
    std::vector<std::uint8_t> src(n * dtypeSize(in));
    for (std::size_t i = 0; i < n; ++i) storeElement(in, src.data(), i, f32[i]);
    for (DType out : {DType::F32, DType::F16, DType::BF16}) {
      for (ElementwiseOp op : {ElementwiseOp::Cast, ElementwiseOp::Fill}) {
        CAPTURE(std::string(nameOf(in)));
        CAPTURE(std::string(nameOf(out)));
        CAPTURE(std::string(nameOf(op)));
        const Run r{in, out, op, 0.1f};
        std::vector<std::uint8_t> expected(n * dtypeSize(out));
        for (std::size_t i = 0; i < n; ++i)
          storeElement(out, expected.data(), i,
                       op == ElementwiseOp::Fill ? r.value : loadElement(in, src.data(), i));
        const auto onHost = run(*host, r, src, n);
        const auto onStrict = run(*strict, r, src, n);
        CHECK(onHost == expected);
        CHECK(onStrict == onHost);  // bit-identical
      }
    }
  }
  // Zero elements: nothing runs, nothing is touched, even with no buffers.
  auto stream = strict->createStream();
  strict->launch(fillArgs(DType::F16, nullptr, 0, 1.0f), *stream);
  stream->synchronize();
  ::unsetenv("ZRT_STRICT_STREAM_DELAY_US");
}

TEST_CASE("a launch with no output buffer is refused, naming the op") {
  MemoryLedger ledger;
  auto dev = makeDevice("host:1M", ledger);
  auto stream = dev->createStream();
  std::string what;
  try {
    dev->launch(castArgs(DType::F16, nullptr, DType::F32, nullptr, 4), *stream);
  } catch (const InvalidArgument& e) {
    what = e.what();
  }
  CHECK(what.find("element-wise cast of 4 elements: no output buffer") != std::string::npos);
}
