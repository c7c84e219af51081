#include "core/termination.h"

#include <signal.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>

#include "core/error.h"

namespace zrt {
namespace {

constexpr int kMaxHooks = 16;
// A slot is written once (under the registration mutex) and then only read, by the handler too.
std::array<std::atomic<TerminationHook>, kMaxHooks> gReport{};
std::array<std::atomic<TerminationHook>, kMaxHooks> gCleanup{};
std::atomic<bool> gReported{false};
static_assert(std::atomic<TerminationHook>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler may only touch lock-free atomics");

// SIGINT and SIGTERM are how jobs are ended; SIGHUP, SIGUSR1 and SIGUSR2 end a process that has
// no handler for them by default, and schedulers send them (Slurm's --signal=USR1, a closed
// terminal). Those three are only taken while nobody else handles them (kOnlyWhileDefault): a
// program that uses SIGUSR1 for itself must keep its swap files.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
constexpr bool kOnlyWhileDefault[] = {false, false, true, true, true};
struct sigaction gPrevious[std::size(kSignals)];

void runAll(std::array<std::atomic<TerminationHook>, kMaxHooks>& hooks, int sig) noexcept {
  for (auto& slot : hooks) {
    const TerminationHook h = slot.load(std::memory_order_acquire);
    if (h == nullptr) break;  // filled in order, never emptied
    h(sig);
  }
}

// deferStopSignals(): the first signal is only recorded here.
std::atomic<bool> gDeferStop{false};
std::atomic<int> gStopSignal{0};

void onSignal(int sig) {
  const int saved = errno;
  if (gDeferStop.load(std::memory_order_acquire)) {
    int none = 0;
    if (gStopSignal.compare_exchange_strong(none, sig)) {
      errno = saved;
      return;
    }
  }
  runTerminationHooks(sig);
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

std::mutex& registrationMutex() {
  static std::mutex mu;
  return mu;
}

void installLocked() {
  // None of the signals may run the handler while gPrevious is being rewritten.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kSignals) sigaddset(&block, sig);
  if (const int rc = pthread_sigmask(SIG_BLOCK, &block, &old); rc != 0)
    ZRT_THROW(Error, "termination handler: pthread_sigmask(SIG_BLOCK) failed: ", std::strerror(rc));
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
    if (kOnlyWhileDefault[i] && ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL))
      continue;
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
  if (failedSig != 0)
    ZRT_THROW(Error, "termination handler: sigaction(", strsignal(failedSig), ") failed: ", std::strerror(failedErr));
}

}  // namespace

void installTerminationHandler() {
  std::lock_guard lock(registrationMutex());
  installLocked();
}

void addTerminationHook(TerminationPhase phase, TerminationHook hook) {
  ZRT_ENFORCE(hook != nullptr, "addTerminationHook: null hook");
  std::lock_guard lock(registrationMutex());
  auto& hooks = phase == TerminationPhase::Report ? gReport : gCleanup;
  bool added = false;
  for (auto& slot : hooks) {
    const TerminationHook h = slot.load(std::memory_order_relaxed);
    if (h == hook) {
      added = true;
      break;
    }
    if (h == nullptr) {
      slot.store(hook, std::memory_order_release);
      added = true;
      break;
    }
  }
  if (!added) ZRT_THROW(Error, "termination hooks: all ", kMaxHooks, " slots in use");
  installLocked();
}

void runTerminationHooks(int signal) noexcept {
  if (!gReported.exchange(true)) runAll(gReport, signal);
  runAll(gCleanup, signal);
}

// SIGUSR1 under deferStopSignals(): a stop request only; a repeat changes nothing.
namespace {
void onStopRequest(int sig) {
  int none = 0;
  gStopSignal.compare_exchange_strong(none, sig);
}
}  // namespace

void deferStopSignals() {
  gDeferStop.store(true, std::memory_order_release);
  installTerminationHandler();
  struct sigaction sa {};
  sa.sa_handler = onStopRequest;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, nullptr) != 0)
    ZRT_THROW(Error, "termination handler: sigaction(SIGUSR1) failed: ", std::strerror(errno));
}

int stopSignal() noexcept { return gStopSignal.load(std::memory_order_acquire); }

}  // namespace zrt
