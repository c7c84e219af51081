#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/strict_device.h"

using namespace zrt;
using namespace std::chrono_literals;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

// Runs `body` in a forked child with stderr captured; returns (wait status, stderr).
template <class Body>
std::pair<int, std::string> inChild(Body body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDERR_FILENO);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {status, out};
}

}  // namespace

TEST_CASE("host-strict: round trips through delayed streams give the data back") {
  MemoryLedger ledger;
  StrictDevice dev(ledger, 1 << 24, 2ms);
  CHECK(dev.streamDelay() == 2ms);
  CHECK_FALSE(dev.hostReadsDeviceMemory());
  const std::size_t n = 10000;  // not a whole number of pages
  auto src = pattern(n, 3);
  DeviceMemory a = dev.allocate(n, MemTag::Parameters);
  DeviceMemory b = dev.allocate(n, MemTag::Gradients);
  DeviceMemory pinned = dev.allocatePinned(n, MemTag::SwapBuffers);
  CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == n);
  CHECK(dev.used() == 2 * n);
  auto s = dev.createStream();
  dev.copyAsync(a.data(), src.data(), n, *s);                       // pageable -> device
  dev.copyAsync(b.data(), a.data(), n, *s);                         // device -> device
  dev.copyAsync(pinned.data(), b.data(), n, *s);                    // device -> pinned
  dev.memsetAsync(a.as<std::uint8_t>() + 100, 0xab, 50, *s);        // memset inside
  std::vector<std::uint8_t> back(n);
  dev.copyAsync(back.data(), a.data(), n, *s);                      // device -> pageable
  s->synchronize();
  // Pinned memory stays readable by the host.
  CHECK(std::memcmp(pinned.data(), src.data(), n) == 0);
  auto expect = src;
  std::memset(expect.data() + 100, 0xab, 50);
  CHECK(back == expect);
  // Ranges past an allocation's end are refused.
  CHECK_THROWS_AS(dev.copyAsync(back.data(), a.as<std::uint8_t>() + 1, n, *s), InvalidArgument);
  a.reset();
  b.reset();
  CHECK(dev.used() == 0);
  CHECK(ledger.total(MemPlace::Device).current == 0);
}

TEST_CASE("host-strict: a host kernel reaches device memory through the addresses it is handed") {
  MemoryLedger ledger;
  StrictDevice dev(ledger, 1 << 24, 1ms);
  const std::size_t n = 4096;
  auto src = pattern(n, 9);
  DeviceMemory a = dev.allocate(n, MemTag::Activations);
  DeviceMemory b = dev.allocate(n, MemTag::Activations);
  auto s = dev.createStream();
  dev.copyAsync(a.data(), src.data(), n, *s);
  std::vector<std::uint8_t> host(n, 1);
  // b = a + host, element by element, on the stream's thread: the kernel sees aliases of a and b
  // (never their public, faulting addresses) and host memory as given.
  std::vector<const void*> seen;
  dev.launchHost("a test's sum",
                 {{a.data(), n}, {b.data(), n}, {host.data(), n}, {nullptr, 0}},
                 [&](const std::vector<void*>& p) {
                   seen.assign(p.begin(), p.end());
                   const auto* x = static_cast<const std::uint8_t*>(p[0]);
                   auto* y = static_cast<std::uint8_t*>(p[1]);
                   const auto* h = static_cast<const std::uint8_t*>(p[2]);
                   for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<std::uint8_t>(x[i] + h[i]);
                 },
                 *s);
  std::vector<std::uint8_t> back(n);
  dev.copyAsync(back.data(), b.data(), n, *s);
  s->synchronize();
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<std::uint8_t>(src[i] + 1);
  CHECK(back == src);
  REQUIRE(seen.size() == 4);
  CHECK(seen[0] != a.data());
  CHECK(seen[1] != b.data());
  CHECK(seen[2] == host.data());
  CHECK(seen[3] == nullptr);
  // A range past its allocation's end is refused before anything runs, naming the kernel.
  CHECK_THROWS_WITH_AS(dev.launchHost("a test's sum", {{a.as<std::uint8_t>() + 1, n}}, [](const auto&) {}, *s),
                       doctest::Contains("a test's sum buffer"), InvalidArgument);
  // An exception in the kernel surfaces at the stream's synchronize().
  dev.launchHost("a failing kernel", {}, [](const auto&) { ZRT_THROW(InvalidArgument, "kernel failed"); }, *s);
  CHECK_THROWS_WITH_AS(s->synchronize(), doctest::Contains("kernel failed"), InvalidArgument);
}

TEST_CASE("host: a host kernel gets the addresses as given") {
  MemoryLedger ledger;
  auto dev = makeDevice("host", ledger);
  DeviceMemory a = dev->allocate(64, MemTag::Activations);
  auto s = dev->createStream();
  void* seen = nullptr;
  dev->launchHost("a test's fill", {{a.data(), 64}}, [&](const std::vector<void*>& p) {
    seen = p[0];
    std::memset(p[0], 7, 64);
  }, *s);
  s->synchronize();
  CHECK(seen == a.data());
  CHECK(a.as<std::uint8_t>()[63] == 7);
}

TEST_CASE("host-strict: a wait on an event orders two delayed streams") {
  MemoryLedger ledger;
  StrictDevice dev(ledger, 1 << 24, 20ms);
  const std::size_t n = 4096;
  auto src = pattern(n, 11);
  DeviceMemory d = dev.allocate(n, MemTag::CommBuckets);
  DeviceMemory e = dev.allocate(n, MemTag::CommBuckets);
  auto producer = dev.createStream();
  auto consumer = dev.createStream();
  auto ready = dev.createEvent();
  dev.memsetAsync(d.data(), 0, n, *producer);
  dev.copyAsync(d.data(), src.data(), n, *producer);
  ready->record(*producer);
  consumer->waitEvent(*ready);
  dev.copyAsync(e.data(), d.data(), n, *consumer);
  std::vector<std::uint8_t> back(n, 0xff);
  dev.copyAsync(back.data(), e.data(), n, *consumer);
  consumer->synchronize();
  CHECK(back == src);
  CHECK(ready->query());
}

TEST_CASE("host-strict: with the delay on, a missing wait reads stale data") {
  MemoryLedger ledger;
  StrictDevice dev(ledger, 1 << 24, 150ms);
  const std::size_t n = 4096;
  auto src = pattern(n, 5);
  DeviceMemory d = dev.allocate(n, MemTag::Activations);
  auto producer = dev.createStream();
  auto consumer = dev.createStream();
  for (int i = 0; i < 3; ++i) dev.memsetAsync(d.data(), 0, n, *producer);  // ~150, 300, 450 ms
  dev.copyAsync(d.data(), src.data(), n, *producer);                        // done at ~600 ms
  std::vector<std::uint8_t> back(n, 0xff);
  dev.copyAsync(back.data(), d.data(), n, *consumer);  // no wait: runs at ~150 ms
  consumer->synchronize();
  producer->synchronize();
  CHECK(back != src);
}

TEST_CASE("host-strict: the delay comes from ZRT_STRICT_STREAM_DELAY_US") {
  MemoryLedger ledger;
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "1500", 1);
  auto dev = makeDevice("host-strict:1M", ledger);
  CHECK(dev->name() == "host-strict:0");
  CHECK(dev->capacity() == (1u << 20));
  CHECK(dynamic_cast<StrictDevice&>(*dev).streamDelay() == 1500us);
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "soon", 1);
  CHECK_THROWS_AS(makeDevice("host-strict", ledger), InvalidArgument);
  ::unsetenv("ZRT_STRICT_STREAM_DELAY_US");
  CHECK(dynamic_cast<StrictDevice&>(*makeDevice("host-strict", ledger)).streamDelay() == 0us);
  CHECK(makeDevice("host", ledger)->hostReadsDeviceMemory());
}

TEST_CASE("host-strict: going over the capacity is an OutOfMemory naming the tag") {
  MemoryLedger ledger("stricttest");
  StrictDevice dev(ledger, 10000, 0us);
  DeviceMemory a = dev.allocate(6000, MemTag::Parameters);
  try {
    DeviceMemory b = dev.allocate(5000, MemTag::OptimizerState);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string w = e.what();
    CHECK(w.find("host-strict:0 is out of device memory") != std::string::npos);
    CHECK(w.find("for 'optimizer state'") != std::string::npos);
    CHECK(w.find("memory ledger 'stricttest'") != std::string::npos);
  }
  CHECK(dev.used() == 6000);
  CHECK(ledger.total(MemPlace::Device).current == 6000);
}

TEST_CASE("host-strict: a host read of device memory dies naming the allocation") {
  auto [status, err] = inChild([] {
    MemoryLedger ledger;
    StrictDevice dev(ledger, 1 << 20, 0us);
    DeviceMemory keep = dev.allocate(64, MemTag::Gradients);
    DeviceMemory d = dev.allocate(8000, MemTag::OptimizerState);
    volatile std::uint8_t* p = d.as<std::uint8_t>();
    std::uint8_t v = p[4100];  // the host reads device memory: must die here
    std::fprintf(stderr, "read %d and lived\n", v);
  });
  const std::string& childStderr = err;  // clang 14: a lambda (INFO) cannot capture a binding
  INFO("child stderr: " << childStderr);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(err.find("host touched device memory: allocation 'optimizer state' at offset 4100 of "
                 "8000 bytes (address 0x") != std::string::npos);
  CHECK(err.find("lived") == std::string::npos);
}

TEST_CASE("host-strict: a host write of device memory dies too; other faults are not taken") {
  auto [status, err] = inChild([] {
    MemoryLedger ledger;
    StrictDevice dev(ledger, 1 << 20, 0us);
    DeviceMemory d = dev.allocate(100, MemTag::Activations);
    d.as<volatile std::uint8_t>()[7] = 1;
  });
  const std::string& childStderr = err;  // clang 14: a lambda (INFO) cannot capture a binding
  INFO("child stderr: " << childStderr);
  CHECK(WIFSIGNALED(status));
  CHECK(err.find("allocation 'activations' at offset 7 of 100 bytes") != std::string::npos);
}

TEST_CASE("host-strict: a fault outside device memory goes to the handler before it") {
  auto [status, err] = inChild([] {
    MemoryLedger ledger;
    StrictDevice dev(ledger, 1 << 20, 0us);
    DeviceMemory d = dev.allocate(100, MemTag::Activations);
    // A page of no access that is not device memory.
    void* p = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) ::_exit(3);
    static_cast<volatile std::uint8_t*>(p)[5] = 1;
  });
  const std::string& childStderr = err;  // clang 14: a lambda (INFO) cannot capture a binding
  INFO("child stderr: " << childStderr);
  // Killed by the signal, or ended by a sanitizer's report: not a clean exit, and not our text.
  CHECK_FALSE((WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)));
  CHECK(err.find("host touched device memory") == std::string::npos);
}

TEST_CASE("the config's zrt.device takes host-strict") {
  Config c = parseConfig(R"({"train_batch_size": 1, "zrt": {"device": "host-strict"}})", "test.json", 1);
  CHECK(c.zrt.device == "host-strict");
  CHECK(deviceSpec(c) == "host-strict");
  Config m = parseConfig(
      R"({"train_batch_size": 1, "zrt": {"device": "host-strict", "host_device_memory": "8M"}})",
      "test.json", 1);
  CHECK(deviceSpec(m) == "host-strict:8388608");
  Config k = parseConfig(R"({"train_batch_size": 1, "zrt": {"device": "host-strict:4M"}})", "test.json", 1);
  CHECK(deviceSpec(k) == "host-strict:4194304");
}
