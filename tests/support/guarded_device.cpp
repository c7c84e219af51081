#include "tests/support/guarded_device.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "core/error.h"

namespace zrt::test {
namespace {

// One lock for every guarded device's operations and bookkeeping.
std::mutex& guardMutex() {
  static std::mutex mu;
  return mu;
}

// The guarded ranges, readable from the fault handler without a lock: a slot is free when its
// length is 0. Written under guardMutex().
constexpr std::size_t kMaxRanges = 4096;
struct Range {
  std::atomic<std::uintptr_t> start{0};
  std::atomic<std::size_t> length{0};
};
std::array<Range, kMaxRanges> ranges;

void addRange(std::uintptr_t start, std::size_t length) {
  for (Range& r : ranges) {
    if (r.length.load() == 0) {
      r.start.store(start);
      r.length.store(length);
      return;
    }
  }
  ZRT_THROW(Error, "guarded device: more than ", kMaxRanges, " allocations at once");
}

void removeRange(std::uintptr_t start) {
  for (Range& r : ranges)
    if (r.length.load() != 0 && r.start.load() == start) r.length.store(0);
}

bool guarded(std::uintptr_t addr) {
  for (const Range& r : ranges) {
    const std::size_t len = r.length.load();
    const std::uintptr_t s = r.start.load();
    if (len != 0 && addr >= s && addr - s < len) return true;
  }
  return false;
}

std::size_t pageRounded(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void protect(const std::map<std::uintptr_t, std::size_t>& mappings, int prot) {
  for (const auto& [start, bytes] : mappings) {
    if (::mprotect(reinterpret_cast<void*>(start), bytes, prot) != 0) {
      std::perror("guarded device: mprotect");
      std::abort();
    }
  }
}

struct sigaction previousSegv, previousBus;

void writeAll(const char* s) {
  std::size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// A fault inside a guarded mapping is a direct CPU access to device memory: say where and end
// the process. Any other fault is not ours: put the previous handler back and return, so the
// faulting instruction runs again and faults into it. Async-signal-safe (write, _exit,
// sigaction; the address formatted by hand).
void onFault(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  if (!guarded(addr)) {
    ::sigaction(sig, sig == SIGSEGV ? &previousSegv : &previousBus, nullptr);
    return;
  }
  char hex[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(addr >> (60 - 4 * i)) & 0xf];
  hex[18] = '\0';
  writeAll("guarded device: the CPU touched device memory directly at ");
  writeAll(hex);
  writeAll("; only the device's own operations may touch it\n");
  ::_exit(kGuardViolationExit);
}

void installFaultHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = onFault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &previousSegv);
    ::sigaction(SIGBUS, &sa, &previousBus);
  });
}

class GuardedStream final : public Stream {
 public:
  void synchronize(std::chrono::milliseconds) override {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  void waitEvent(Event&) override {}
  void* native() const override { return nullptr; }
  void keep(std::exception_ptr e) {
    if (!error_) error_ = e;
  }

 private:
  std::exception_ptr error_;  // a host callback's, for the next synchronize()
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
  protect(mappings_, PROT_READ | PROT_WRITE);
  // Closed again however the operation ends.
  struct Reclose {
    const std::map<std::uintptr_t, std::size_t>& m;
    ~Reclose() { protect(m, PROT_NONE); }
  } reclose{mappings_};
  ++operations_;
  op();
}

void GuardedDevice::copyAsync(void* dst, const void* src, std::size_t bytes, Stream&) {
  run([=] { std::memmove(dst, src, bytes); });
}

void GuardedDevice::memsetAsync(void* dst, int value, std::size_t bytes, Stream&) {
  run([=] { std::memset(dst, value, bytes); });
}

void GuardedDevice::hostCallback(Stream& stream, std::function<void()> fn) {
  try {
    run(fn);
  } catch (...) {
    dynamic_cast<GuardedStream&>(stream).keep(std::current_exception());
  }
}

void GuardedDevice::upload(void* dst, const void* src, std::size_t bytes) {
  run([=] { std::memcpy(dst, src, bytes); });
}

void GuardedDevice::download(void* dst, const void* src, std::size_t bytes) {
  run([=] { std::memcpy(dst, src, bytes); });
}

std::uint64_t GuardedDevice::operations() const {
  std::lock_guard lock(guardMutex());
  return operations_;
}

void* GuardedDevice::rawAllocate(std::size_t bytes) {
  const std::size_t len = pageRounded(bytes);
  void* p = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throwOutOfMemory(bytes, "guarded device", 0, capacity());
  std::lock_guard lock(guardMutex());
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  try {
    addRange(start, len);
  } catch (...) {
    ::munmap(p, len);
    throw;
  }
  mappings_[start] = len;
  return p;
}

void GuardedDevice::rawFree(void* ptr, std::size_t bytes) noexcept {
  std::lock_guard lock(guardMutex());
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  mappings_.erase(start);
  removeRange(start);
  ::munmap(ptr, pageRounded(bytes));
}

void* GuardedDevice::rawAllocatePinned(std::size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, bytes) != 0) throwOutOfMemory(bytes, "pinned", 0, capacity());
  return p;
}

void GuardedDevice::rawFreePinned(void* ptr, std::size_t) noexcept { std::free(ptr); }

}  // namespace zrt::test
