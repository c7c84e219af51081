#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/host_device.h"

using namespace zrt;
using namespace std::chrono_literals;

TEST_CASE("host device charges exact bytes to the ledger by tag and place") {
  MemoryLedger ledger;
  HostDevice dev(ledger, 1 << 20);
  {
    DeviceMemory p = dev.allocate(1000, MemTag::Parameters);
    DeviceMemory g = dev.allocate(24, MemTag::Gradients);
    DeviceMemory s = dev.allocatePinned(4096, MemTag::SwapBuffers);
    CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == 1000);
    CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).current == 24);
    CHECK(ledger.get(MemTag::SwapBuffers, MemPlace::PinnedHost).current == 4096);
    CHECK(ledger.total(MemPlace::Device).current == 1024);
    CHECK(dev.used() == 1024);
    CHECK(reinterpret_cast<std::uintptr_t>(p.data()) % 4096 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(s.data()) % 4096 == 0);
    DeviceMemory moved = std::move(p);
    CHECK(!p);
    CHECK(moved.bytes() == 1000);
  }
  CHECK(ledger.total(MemPlace::Device).current == 0);
  CHECK(ledger.total(MemPlace::Device).peak == 1024);
  CHECK(ledger.total(MemPlace::PinnedHost).current == 0);
  CHECK(dev.used() == 0);
}

TEST_CASE("going over the capacity raises OutOfMemory with the ledger") {
  MemoryLedger ledger("oomtest");
  HostDevice dev(ledger, 10000);
  DeviceMemory a = dev.allocate(6000, MemTag::OptimizerState);
  try {
    DeviceMemory b = dev.allocate(5000, MemTag::Activations);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    std::string w = e.what();
    CHECK(w.find("host:0 is out of device memory") != std::string::npos);
    CHECK(w.find("tried to allocate 4.88 KiB") != std::string::npos);
    CHECK(w.find("memory ledger 'oomtest'") != std::string::npos);
    CHECK(w.find("optimizer state") != std::string::npos);
  }
  // The failed allocation left nothing behind.
  CHECK(dev.used() == 6000);
  CHECK(ledger.total(MemPlace::Device).current == 6000);
  DeviceMemory c = dev.allocate(4000, MemTag::Activations);
  CHECK(dev.used() == 10000);
}

TEST_CASE("makeDevice reads a capacity from the spec") {
  MemoryLedger ledger;
  auto dev = makeDevice("host:1M", ledger);
  CHECK(dev->kind() == DeviceKind::Host);
  CHECK(dev->capacity() == (1u << 20));
  CHECK_THROWS_AS(makeDevice("tpu", ledger), InvalidArgument);
  CHECK_THROWS_AS(makeDevice("host:lots", ledger), InvalidArgument);
  // Without a GPU (or without CUDA in the build) asking for one is a clear error, not a crash.
  if (!cudaDeviceAvailable()) CHECK_THROWS_AS(makeDevice("cuda:0", ledger), InvalidArgument);
}

TEST_CASE("stream work runs in order on the copy engine, overlapping the caller") {
  MemoryLedger ledger;
  HostDevice dev(ledger, 64 << 20);
  auto stream = dev.createStream();
  DeviceMemory src = dev.allocatePinned(1 << 20, MemTag::Other);
  DeviceMemory dst = dev.allocate(1 << 20, MemTag::Other);
  std::memset(src.data(), 7, src.bytes());

  std::atomic<bool> release{false};
  std::atomic<int> order{0};
  int callbackSaw = -1;
  // The first task blocks until the caller lets it go: if the stream ran work on the calling
  // thread, this test would deadlock instead of reaching the store below.
  dev.hostCallback(*stream, [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
    order = 1;
  });
  dev.memsetAsync(dst.data(), 0, dst.bytes(), *stream);
  dev.copyAsync(dst.data(), src.data(), src.bytes(), *stream);
  dev.hostCallback(*stream, [&] { callbackSaw = order.load(); });
  CHECK(order.load() == 0);
  release = true;
  stream->synchronize();
  CHECK(callbackSaw == 1);
  auto* d = dst.as<unsigned char>();
  CHECK(d[0] == 7);
  CHECK(d[dst.bytes() - 1] == 7);
}

TEST_CASE("events order work across streams and can be waited on") {
  MemoryLedger ledger;
  HostDevice dev(ledger, 1 << 20);
  auto s1 = dev.createStream();
  auto s2 = dev.createStream();
  auto ev = dev.createEvent();
  CHECK(ev->query());  // never recorded

  std::atomic<bool> release{false};
  std::vector<int> trace;
  std::mutex mu;
  dev.hostCallback(*s1, [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
    std::lock_guard l(mu);
    trace.push_back(1);
  });
  ev->record(*s1);
  s2->waitEvent(*ev);
  dev.hostCallback(*s2, [&] {
    std::lock_guard l(mu);
    trace.push_back(2);
  });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(ev->query());
  CHECK_THROWS_AS(ev->wait(10ms), TimeoutError);
  release = true;
  ev->wait();
  CHECK(ev->query());
  s2->synchronize();
  REQUIRE(trace.size() == 2);
  CHECK(trace[0] == 1);
  CHECK(trace[1] == 2);
}

TEST_CASE("a failing callback surfaces at synchronize; a stuck stream times out") {
  MemoryLedger ledger;
  HostDevice dev(ledger, 1 << 20);
  auto s = dev.createStream();
  dev.hostCallback(*s, [] { throw IoError("disk on fire", 5); });
  int after = 0;
  dev.hostCallback(*s, [&] { after = 1; });
  CHECK_THROWS_AS(s->synchronize(), IoError);
  CHECK(after == 1);  // later work still ran; the first error was kept

  auto stuck = dev.createStream();
  std::atomic<bool> release{false};
  dev.hostCallback(*stuck, [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  try {
    stuck->synchronize(20ms);
    FAIL("expected a timeout");
  } catch (const TimeoutError& e) {
    CHECK(std::string(e.what()).find("1 of 1 queued tasks still unfinished") != std::string::npos);
  }
  release = true;
  stuck->synchronize();
}
