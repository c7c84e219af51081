// Runs on a real GPU; its main (cuda_test_main.cpp) exits 77, a ctest skip, without one.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/build_config.h"
#include "core/device.h"
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
