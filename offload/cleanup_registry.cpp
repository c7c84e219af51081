#include "offload/cleanup_registry.h"

#include <fcntl.h>
#include <linux/limits.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace zrt::offload {
namespace {

enum SlotState : int { kFree = 0, kWriting = 1, kActive = 2 };

// A slot's path may be rewritten by another thread (unregister, then a new registration) while
// the signal handler reads it. The handler reads it like a seqlock: it copies the path, then
// checks that the slot is still active under the same generation, and removes nothing it could
// have read half-written. The characters are atomics so those reads are not data races.
struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<unsigned> generation{0};  // bumped after each registration's path is written,
                                        // and at each unregistration
  std::array<std::atomic<char>, PATH_MAX> path{};
};
static_assert(std::atomic<char>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<unsigned>::is_always_lock_free,
              "the signal handler may only touch lock-free atomics");

constexpr int kSlots = 64;
std::array<Slot, kSlots> gSlots;

constexpr int kSignals[] = {SIGINT, SIGTERM};
// deferStopSignals(): the first signal is only recorded here.
std::atomic<bool> gDeferStop{false};
std::atomic<int> gStopSignal{0};
struct sigaction gPrevious[2];

// linux_dirent64 as getdents64 fills it (glibc has no wrapper before 2.30's getdents64).
struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// Async-signal-safe: lock-free atomics, a stack copy, and removeDirectoryFlat's system calls.
void cleanupAll() noexcept {
  char path[PATH_MAX];
  for (auto& slot : gSlots) {
    if (slot.state.load(std::memory_order_acquire) != kActive) continue;
    const unsigned generation = slot.generation.load(std::memory_order_acquire);
    std::size_t i = 0;
    for (; i + 1 < sizeof(path); ++i) {
      path[i] = slot.path[i].load(std::memory_order_relaxed);
      if (path[i] == '\0') break;
    }
    path[i] = '\0';
    std::atomic_thread_fence(std::memory_order_acquire);
    // Rewritten meanwhile (unregistered, maybe registered again): the copy may be torn.
    if (slot.state.load(std::memory_order_relaxed) != kActive ||
        slot.generation.load(std::memory_order_relaxed) != generation)
      continue;
    removeDirectoryFlat(path);
  }
}

void onSignal(int sig) {
  const int saved = errno;
  if (gDeferStop.load(std::memory_order_acquire)) {
    int none = 0;
    if (gStopSignal.compare_exchange_strong(none, sig)) {
      errno = saved;
      return;
    }
  }
  cleanupAll();
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    if (kSignals[i] == sig) {
      // Hand the signal to whoever had it before (the default action ends the process with
      // this signal); it is blocked while this handler runs and delivered when it returns.
      sigaction(sig, &gPrevious[i], nullptr);
      raise(sig);
    }
  }
  errno = saved;
}

void atExit() { cleanupAll(); }

// SIGUSR1 under deferStopSignals(): a stop request only (mpirun forwards it to every rank and
// keeps running, unlike SIGTERM); a repeat changes nothing.
void onStopRequest(int sig) {
  int none = 0;
  gStopSignal.compare_exchange_strong(none, sig);
}

// Installs the handler, chaining to whatever is installed now. Called at every registration:
// a library or framework that set its own handler after ours (MPI, a test runner) is then
// chained behind ours instead of silently replacing it. Throws Error naming the call that
// failed (the directories would otherwise silently outlive a Ctrl-C).
void install() {
  static std::mutex mu;
  static bool atexitDone = false;
  std::lock_guard lock(mu);
  // No SIGINT/SIGTERM may run the handler while gPrevious is being rewritten.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kSignals) sigaddset(&block, sig);
  if (const int rc = pthread_sigmask(SIG_BLOCK, &block, &old); rc != 0)
    ZRT_THROW(Error, "cleanup registry: pthread_sigmask(SIG_BLOCK) failed: ", std::strerror(rc));
  int failedSig = 0;
  int failedErr = 0;
  for (std::size_t i = 0; i < std::size(kSignals) && failedSig == 0; ++i) {
    struct sigaction current {};
    if (sigaction(kSignals[i], nullptr, &current) != 0) {
      failedSig = kSignals[i];
      failedErr = errno;
      break;
    }
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == onSignal) continue;
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) continue;
    gPrevious[i] = current;
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(kSignals[i], &sa, nullptr) != 0) {
      failedSig = kSignals[i];
      failedErr = errno;
    }
  }
  // Restoring the mask this thread had cannot fail with a valid `how` and set.
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (failedSig != 0) {
    ZRT_THROW(Error, "cleanup registry: sigaction(", strsignal(failedSig),
              ") failed: ", std::strerror(failedErr));
  }
  if (!atexitDone) {
    if (std::atexit(atExit) != 0)
      ZRT_THROW(Error, "cleanup registry: atexit() refused the swap-directory cleanup hook");
    atexitDone = true;
  }
}

}  // namespace

int removeDirectoryFlat(const char* dir) noexcept {
  int first = 0;
  const int dfd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno == ENOENT ? 0 : errno;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dfd, buf, sizeof(buf));
    if (n <= 0) {
      if (n < 0 && first == 0) first = errno;
      break;
    }
    for (long pos = 0; pos < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + pos);
      pos += d->reclen;
      if (std::strcmp(d->name, ".") == 0 || std::strcmp(d->name, "..") == 0) continue;
      if (::unlinkat(dfd, d->name, 0) != 0 && errno != ENOENT && first == 0) first = errno;
    }
  }
  ::close(dfd);
  if (::rmdir(dir) != 0 && errno != ENOENT && first == 0) first = errno;
  return first;
}

int registerCleanupDirectory(const std::filesystem::path& dir) {
  const std::string s = dir.string();
  if (s.size() >= PATH_MAX) ZRT_THROW(Error, "cleanup registry: path too long: ", s);
  install();
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    Slot& slot = gSlots[static_cast<std::size_t>(i)];
    if (slot.state.compare_exchange_strong(expected, kWriting)) {
      for (std::size_t k = 0; k <= s.size(); ++k)
        slot.path[k].store(s.c_str()[k], std::memory_order_relaxed);
      slot.generation.fetch_add(1, std::memory_order_release);
      slot.state.store(kActive, std::memory_order_release);
      return i;
    }
  }
  ZRT_THROW(Error, "cleanup registry: all ", kSlots, " slots in use; cannot register ", s);
}

void deferStopSignals() {
  gDeferStop.store(true, std::memory_order_release);
  install();
  struct sigaction sa {};
  sa.sa_handler = onStopRequest;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, nullptr) != 0)
    ZRT_THROW(Error, "cleanup registry: sigaction(SIGUSR1) failed: ", std::strerror(errno));
}

int stopSignal() noexcept { return gStopSignal.load(std::memory_order_acquire); }

void unregisterCleanupDirectory(int slot) {
  ZRT_ENFORCE(slot >= 0 && slot < kSlots, "bad cleanup slot ", slot);
  Slot& s = gSlots[static_cast<std::size_t>(slot)];
  s.generation.fetch_add(1, std::memory_order_acq_rel);
  s.state.store(kFree, std::memory_order_release);
}

}  // namespace zrt::offload
