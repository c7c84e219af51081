// Runs on a real GPU; its main (cuda_test_main.cpp) exits 77, a ctest skip, without one.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/build_config.h"
#include "core/device.h"
#include "core/element_arithmetic.h"
#include "core/elementwise.h"
#include "core/error.h"

using namespace zrt;

TEST_CASE("cuda device: ledger, copies, events, host callbacks") {
  MemoryLedger ledger;
  auto dev = makeDevice("cuda:0", ledger);
  CHECK(dev->kind() == DeviceKind::Cuda);
  CHECK(dev->capacity() > 0);
  auto stream = dev->createStream();
  const std::size_t n = 1 << 20;
  DeviceMemory host = dev->allocatePinned(n, MemTag::SwapBuffers);
  DeviceMemory d = dev->allocate(n, MemTag::Parameters);
  CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == n);
  CHECK(ledger.get(MemTag::SwapBuffers, MemPlace::PinnedHost).current == n);
  std::memset(host.data(), 0x5a, n);
  dev->copyAsync(d.data(), host.data(), n, *stream);
  dev->memsetAsync(host.data(), 0, n, *stream);
  dev->copyAsync(host.data(), d.data(), n, *stream);
  bool ran = false;
  dev->hostCallback(*stream, [&] { ran = true; });
  auto ev = dev->createEvent();
  ev->record(*stream);
  ev->wait();
  stream->synchronize();
  CHECK(ran);
  CHECK(host.as<unsigned char>()[n - 1] == 0x5a);
  CHECK_THROWS_AS(dev->allocate(dev->capacity() * 2, MemTag::Activations), OutOfMemory);
}

TEST_CASE("cuda device: an element-wise kernel stores the bits of core/dtype.h's conversions") {
  MemoryLedger ledger;
  auto dev = makeDevice("cuda:0", ledger);
  auto stream = dev->createStream();
  const std::size_t n = 4099;  // more than one block, not a multiple of one
  std::vector<float> in(n);
  std::uint32_t x = 7;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    std::memcpy(&in[i], &x, sizeof x);
  }
  for (DType out : {DType::F16, DType::BF16}) {
    CAPTURE(std::string(nameOf(out)));
    DeviceMemory din = dev->allocate(n * 4, MemTag::Other);
    DeviceMemory dout = dev->allocate(n * dtypeSize(out), MemTag::Other);
    dev->copyAsync(din.data(), in.data(), n * 4, *stream);
    dev->launch(castArgs(out, dout.data(), DType::F32, din.data(), n), *stream);
    std::vector<std::uint8_t> got(n * dtypeSize(out)), expected(got.size());
    dev->copyAsync(got.data(), dout.data(), got.size(), *stream);
    stream->synchronize();
    for (std::size_t i = 0; i < n; ++i) storeElement(out, expected.data(), i, in[i]);
    CHECK(got == expected);
  }
}
