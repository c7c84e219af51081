#include "core/strict_device.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/sys_check.h"
#include "core/units.h"

namespace zrt {
namespace {
// A nested name: this file shares a unity batch with host_device.cpp, whose anonymous namespace
// has helpers of its own.
namespace strict {

// The public (PROT_NONE) ranges of every StrictDevice's allocations, readable from the fault
// handler without a lock: a slot is free when its length is 0. Written under slotMutex().
constexpr std::size_t kMaxSlots = 16384;
struct Slot {
  std::atomic<std::uintptr_t> start{0};
  std::atomic<std::size_t> length{0};  // mapped (page-rounded) bytes
  std::atomic<std::size_t> bytes{0};   // the bytes asked for
  std::atomic<const char*> tag{nullptr};
  std::atomic<std::size_t> tagLength{0};
};
std::array<Slot, kMaxSlots> slots;

std::mutex& slotMutex() {
  static std::mutex mu;
  return mu;
}

void addSlot(std::uintptr_t start, std::size_t length, std::size_t bytes, MemTag tag) {
  std::lock_guard lock(slotMutex());
  for (Slot& s : slots) {
    if (s.length.load() != 0) continue;
    const std::string_view name = nameOf(tag);  // a string literal: lives for the process
    s.start.store(start);
    s.bytes.store(bytes);
    s.tag.store(name.data());
    s.tagLength.store(name.size());
    s.length.store(length);  // last: the slot is live from here
    return;
  }
  ZRT_THROW(Error, "host-strict device: more than ", kMaxSlots, " allocations at once");
}

void removeSlot(std::uintptr_t start) noexcept {
  std::lock_guard lock(slotMutex());
  for (Slot& s : slots)
    if (s.length.load() != 0 && s.start.load() == start) s.length.store(0);
}

struct sigaction previousSegv, previousBus;

void writeAll(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Appends to a fixed buffer without allocating (async-signal-safe).
struct SignalText {
  char buf[512];
  std::size_t n = 0;
  void add(const char* s, std::size_t len) {
    for (std::size_t i = 0; i < len && n < sizeof buf; ++i) buf[n++] = s[i];
  }
  void add(const char* s) { add(s, std::strlen(s)); }
  void addDecimal(std::uint64_t v) {
    char digits[20];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0) add(&digits[--k], 1);
  }
  void addHex(std::uint64_t v) {
    add("0x");
    for (int i = 0; i < 16; ++i) add(&"0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf], 1);
  }
};

// A fault inside a public range is a host access to device memory: say which allocation and
// where, and abort. Any other fault is not ours: put the previous handler back and return, so the
// faulting instruction runs again and faults into it.
void onFault(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const Slot& s : slots) {
    const std::size_t len = s.length.load();
    const std::uintptr_t start = s.start.load();
    if (len == 0 || addr < start || addr - start >= len) continue;
    SignalText t;
    t.add("host touched device memory: allocation '");
    t.add(s.tag.load(), s.tagLength.load());
    t.add("' at offset ");
    t.addDecimal(addr - start);
    t.add(" of ");
    t.addDecimal(s.bytes.load());
    t.add(" bytes (address ");
    t.addHex(addr);
    t.add("); on the host-strict device only the device's streams (copies, memsets, kernels) may "
          "touch device memory\n");
    writeAll(t.buf, t.n);
    // abort() with the default action, whatever handler a sanitizer has for SIGABRT.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGABRT, &dfl, nullptr);
    std::abort();
  }
  ::sigaction(sig, sig == SIGSEGV ? &previousSegv : &previousBus, nullptr);
}

// Installs onFault unless it is the current handler. Checked at every device construction and
// allocation, not once: a test framework or a sanitizer may put its own handler back later (and
// would then chain to ours, or not); the handler found becomes the one a foreign fault goes to.
void ensureFaultHandler() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  for (int sig : {SIGSEGV, SIGBUS}) {
    struct sigaction current {};
    ZRT_CHECK_SYS(::sigaction(sig, nullptr, &current), "reading the handler of signal ", sig);
    if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == onFault) continue;
    struct sigaction sa {};
    sa.sa_sigaction = onFault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    // Written while a fault may read it on another thread only in a program that faults while
    // it constructs devices; the previous handler is then taken as it was.
    ZRT_CHECK_SYS(::sigaction(sig, &sa, sig == SIGSEGV ? &previousSegv : &previousBus),
                  "installing the host-strict fault handler for signal ", sig);
  }
}

std::size_t pageRounded(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

std::chrono::microseconds delayFromEnvironment() {
  const char* env = std::getenv("ZRT_STRICT_STREAM_DELAY_US");
  if (!env || !*env) return std::chrono::microseconds{0};
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(env, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 60'000'000)
    ZRT_THROW(InvalidArgument, "ZRT_STRICT_STREAM_DELAY_US='", env,
              "': expected a whole number of microseconds from 0 to 60000000");
  return std::chrono::microseconds{v};
}

}  // namespace strict
}  // namespace

// One allocation: the memfd, its public PROT_NONE mapping and the read-write alias.
class StrictDevice::Mapping {
 public:
  Mapping(std::size_t bytes, MemTag tag) : bytes_(bytes), length_(strict::pageRounded(bytes)) {
    const std::string name = "zrt-host-strict-" + std::string(nameOf(tag));
    fd_ = ZRT_CHECK_SYS(::memfd_create(name.c_str(), MFD_CLOEXEC),
                        "device memory for '", nameOf(tag), "'");
    try {
      ZRT_CHECK_SYS(::ftruncate(fd_, static_cast<off_t>(length_)), formatBytes(length_),
                    " of device memory for '", nameOf(tag), "'");
      public_ = map(PROT_NONE, tag);
      alias_ = map(PROT_READ | PROT_WRITE, tag);
    } catch (...) {
      release();
      throw;
    }
  }
  ~Mapping() { release(); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* publicAddress() const { return static_cast<char*>(public_); }
  char* alias() const { return static_cast<char*>(alias_); }
  std::size_t bytes() const { return bytes_; }
  std::size_t length() const { return length_; }

 private:
  void* map(int prot, MemTag tag) {
    void* p = ::mmap(nullptr, length_, prot, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      throw IoError(detail::cat("host-strict device: mmap of ", formatBytes(length_),
                                " for '", nameOf(tag), "' failed: ", std::strerror(err)),
                    err);
    }
    return p;
  }
  void release() noexcept {
    // Failures here cannot be reported to anyone (a destructor); they leave a leak, no more.
    if (alias_) ::munmap(alias_, length_);
    if (public_) ::munmap(public_, length_);
    if (fd_ >= 0) ::close(fd_);
    alias_ = public_ = nullptr;
    fd_ = -1;
  }

  std::size_t bytes_;
  std::size_t length_;
  int fd_ = -1;
  void* public_ = nullptr;
  void* alias_ = nullptr;
};

StrictDevice::StrictDevice(MemoryLedger& ledger, std::uint64_t capacityBytes,
                           std::optional<std::chrono::microseconds> streamDelay)
    : Device(ledger),
      streams_(ledger, 0),
      capacity_(capacityBytes),
      delay_(streamDelay ? *streamDelay : strict::delayFromEnvironment()) {
  strict::ensureFaultHandler();
}

StrictDevice::~StrictDevice() = default;

std::unique_ptr<Stream> StrictDevice::createStream() { return streams_.createStream(); }
std::unique_ptr<Event> StrictDevice::createEvent() { return streams_.createEvent(); }

void StrictDevice::delay(Stream& stream) {
  if (delay_.count() == 0) return;
  streams_.hostCallback(stream, [d = delay_] { std::this_thread::sleep_for(d); });
}

void* StrictDevice::translate(const void* p, std::size_t bytes, const char* what) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return const_cast<void*>(p);
  --it;
  const Mapping& m = *it->second;
  const std::uintptr_t offset = addr - it->first;
  if (offset >= m.length()) return const_cast<void*>(p);
  if (bytes > m.bytes() || offset > m.bytes() - bytes)
    ZRT_THROW(InvalidArgument, name(), ": ", what, " of ", bytes, " bytes at offset ", offset,
              " runs past the end of a ", m.bytes(), "-byte device allocation");
  return m.alias() + offset;
}

bool StrictDevice::isDeviceMemory(const void* p, std::size_t bytes) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return false;
  --it;
  const std::uintptr_t offset = addr - it->first;
  return offset < it->second->bytes() && bytes <= it->second->bytes() - offset;
}

void StrictDevice::copyAsync(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  void* d = translate(dst, bytes, "copy destination");
  const void* s = translate(src, bytes, "copy source");
  delay(stream);
  streams_.copyAsync(d, s, bytes, stream);
}

void StrictDevice::memsetAsync(void* dst, int value, std::size_t bytes, Stream& stream) {
  void* d = translate(dst, bytes, "memset");
  delay(stream);
  streams_.memsetAsync(d, value, bytes, stream);
}

void StrictDevice::hostCallback(Stream& stream, std::function<void()> fn) {
  delay(stream);
  streams_.hostCallback(stream, std::move(fn));
}

void StrictDevice::launch(const ElementwiseArgs& args, Stream& stream) {
  checkElementwise(args);
  if (args.count == 0) return;
  // Every pointer the op uses is checked against its allocation and swapped for the alias the
  // stream thread may touch; one it does not use stays as given.
  const ElementwiseExtents e = extentsOf(args);
  ElementwiseArgs a = args;
  if (e.out) a.out = translate(args.out, e.out, "kernel output");
  if (e.in) a.in = translate(args.in, e.in, "kernel input");
  if (e.flag) a.flag = static_cast<std::int32_t*>(translate(args.flag, e.flag, "kernel flag"));
  if (e.partials)
    a.partials = static_cast<double*>(translate(args.partials, e.partials, "kernel partial sums"));
  for (int k = 0; e.state && k < e.states; ++k)
    a.state[k] = static_cast<float*>(translate(args.state[k], e.state, "kernel optimizer state"));
  delay(stream);
  streams_.hostCallback(stream, [a] { runElementwiseOnHost(a); });
}

void StrictDevice::launchHost(std::string_view what, std::vector<KernelBuffer> buffers,
                              HostKernel kernel, Stream& stream) {
  const std::string label = std::string(what) + " buffer";
  std::vector<void*> aliases;
  aliases.reserve(buffers.size());
  for (const KernelBuffer& b : buffers) aliases.push_back(b.data ? translate(b.data, b.bytes, label.c_str()) : nullptr);
  delay(stream);
  streams_.hostCallback(stream, [k = std::move(kernel), a = std::move(aliases)] { k(a); });
}

void* StrictDevice::rawAllocate(std::size_t bytes) { return rawAllocateTagged(bytes, MemTag::Other); }

void* StrictDevice::rawAllocateTagged(std::size_t bytes, MemTag tag) {
  const std::uint64_t before = used_.fetch_add(bytes);
  if (before + bytes > capacity_) {
    used_.fetch_sub(bytes);
    ZRT_THROW(OutOfMemory, name(), " is out of device memory: tried to allocate ",
              formatBytes(bytes), " for '", nameOf(tag), "' with ", formatBytes(before),
              " in use of ", formatBytes(capacity_), " (",
              formatBytes(capacity_ > before ? capacity_ - before : 0), " free)\n",
              ledger().table());
  }
  try {
    strict::ensureFaultHandler();
    auto m = std::make_unique<Mapping>(bytes, tag);
    const auto start = reinterpret_cast<std::uintptr_t>(m->publicAddress());
    strict::addSlot(start, m->length(), bytes, tag);
    void* p = m->publicAddress();
    std::lock_guard lock(mu_);
    mappings_.emplace(start, std::move(m));
    return p;
  } catch (...) {
    used_.fetch_sub(bytes);
    throw;
  }
}

void StrictDevice::rawFree(void* ptr, std::size_t bytes) noexcept {
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  strict::removeSlot(start);
  std::unique_ptr<Mapping> m;
  {
    std::lock_guard lock(mu_);
    auto it = mappings_.find(start);
    if (it != mappings_.end()) {
      m = std::move(it->second);
      mappings_.erase(it);
    }
  }
  used_.fetch_sub(bytes);
}

void* StrictDevice::rawAllocatePinned(std::size_t bytes) {
  void* p = nullptr;
  if (const int rc = ::posix_memalign(&p, 4096, bytes); rc != 0)
    ZRT_THROW(OutOfMemory, name(), ": could not allocate ", formatBytes(bytes),
              " of pinned host memory: ", std::strerror(rc), "\n", ledger().table());
  if (::mlock(p, bytes) != 0) {
    const int err = errno;
    std::free(p);
    ZRT_THROW(OutOfMemory, name(), ": mlock of ", formatBytes(bytes),
              " pinned host memory failed: ", std::strerror(err),
              " (raise RLIMIT_MEMLOCK with `ulimit -l`)\n", ledger().table());
  }
  return p;
}

void StrictDevice::rawFreePinned(void* ptr, std::size_t bytes) noexcept {
  ::munlock(ptr, bytes);
  std::free(ptr);
}

}  // namespace zrt
