#include "tests/support/guarded_device.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zrt::test {
namespace {

// Every guarded mapping of the process (start -> bytes), under one lock that also serialises
// the devices' operations: a mapping is open only while its device runs one.
std::mutex& guardMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::uintptr_t, std::size_t>& mappings() {
  static std::map<std::uintptr_t, std::size_t> m;
  return m;
}
std::atomic<std::uint64_t> opsRun{0};

std::size_t pageRounded(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void protectAll(int prot) {
  for (const auto& [start, bytes] : mappings()) {
    if (::mprotect(reinterpret_cast<void*>(start), bytes, prot) != 0) {
      std::perror("guarded device: mprotect");
      std::abort();
    }
  }
}

// A fault inside a guarded mapping is a direct CPU access to device memory. Async-signal-safe:
// formats into a stack buffer and writes it.
void onFault(int sig, siginfo_t* info, void*) {
  char msg[160];
  const int n = std::snprintf(msg, sizeof msg,
                              "guarded device: the CPU touched device memory directly at %p "
                              "(signal %d); only its own operations may touch it\n",
                              info->si_addr, sig);
  if (n > 0 && ::write(STDERR_FILENO, msg, static_cast<std::size_t>(n)) < 0) {
    // Nothing more can be said from a signal handler.
  }
  ::_exit(kGuardViolationExit);
}

void installFaultHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = onFault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, nullptr);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

class GuardedStream final : public Stream {
 public:
  void synchronize(std::chrono::milliseconds) override {}  // operations ran when queued
  void waitEvent(Event&) override {}
  void* native() const override { return nullptr; }
};

class GuardedEvent final : public Event {
 public:
  void record(Stream&) override {}
  bool query() override { return true; }
  void wait(std::chrono::milliseconds) override {}
};

}  // namespace

GuardedDevice::GuardedDevice(MemoryLedger& ledger) : Device(ledger) { installFaultHandler(); }

GuardedDevice::~GuardedDevice() = default;

std::unique_ptr<Stream> GuardedDevice::createStream() { return std::make_unique<GuardedStream>(); }
std::unique_ptr<Event> GuardedDevice::createEvent() { return std::make_unique<GuardedEvent>(); }

void GuardedDevice::run(const std::function<void()>& op) {
  std::lock_guard lock(guardMutex());
  protectAll(PROT_READ | PROT_WRITE);
  op();
  protectAll(PROT_NONE);
  opsRun.fetch_add(1);
}

void GuardedDevice::copyAsync(void* dst, const void* src, std::size_t bytes, Stream&) {
  run([=] { std::memmove(dst, src, bytes); });
}

void GuardedDevice::memsetAsync(void* dst, int value, std::size_t bytes, Stream&) {
  run([=] { std::memset(dst, value, bytes); });
}

void GuardedDevice::hostCallback(Stream&, std::function<void()> fn) { run(fn); }

void GuardedDevice::upload(void* dst, const void* src, std::size_t bytes) {
  run([=] { std::memcpy(dst, src, bytes); });
}

void GuardedDevice::download(void* dst, const void* src, std::size_t bytes) {
  run([=] { std::memcpy(dst, src, bytes); });
}

std::uint64_t GuardedDevice::operations() const { return opsRun.load(); }

void* GuardedDevice::rawAllocate(std::size_t bytes) {
  const std::size_t len = pageRounded(bytes);
  void* p = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throwOutOfMemory(bytes, "guarded device", 0, capacity());
  std::lock_guard lock(guardMutex());
  mappings()[reinterpret_cast<std::uintptr_t>(p)] = len;
  return p;
}

void GuardedDevice::rawFree(void* ptr, std::size_t bytes) noexcept {
  std::lock_guard lock(guardMutex());
  mappings().erase(reinterpret_cast<std::uintptr_t>(ptr));
  ::munmap(ptr, pageRounded(bytes));
}

void* GuardedDevice::rawAllocatePinned(std::size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, bytes) != 0) throwOutOfMemory(bytes, "pinned", 0, capacity());
  return p;
}

void GuardedDevice::rawFreePinned(void* ptr, std::size_t) noexcept { std::free(ptr); }

}  // namespace zrt::test
