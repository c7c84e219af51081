// Last words and last cleanup: hooks that run when the process is being ended abnormally, so a
// killed job says what it was doing and leaves no swap file behind. They run
//   - from the SIGINT/SIGTERM handler (what a Ctrl-C, a scheduler's cancel, or mpirun ending a
//     job after one of its ranks died sends), installed on the first registration: after the
//     hooks the previous disposition is restored and the signal re-raised, so the process still
//     ends by that signal and a handler installed earlier (MPI's, the application's) still runs;
//     the same for SIGHUP, SIGUSR1 and SIGUSR2 (a closed terminal, Slurm's --signal=USR1, or
//     mpirun forwarding either), but only while their disposition is the default, which ends
//     the process: a program that handles them itself keeps them, and its swap files;
//   - from runTerminationHooks(0), called by a component that is about to end the process on
//     purpose (the comm watchdog, just before MPI_Abort).
// Report hooks (the comm layer's "what was this rank waiting for") run before cleanup hooks
// (the swap directories), and run once per process; cleanup hooks run every time (they are
// idempotent). Signals whose disposition is SIG_IGN are left alone (they do not end the
// process). SIGKILL cannot be caught: the peers of a killed rank do its cleanup
// (offload/cleanup_registry.h).
// Hooks must be async-signal-safe: no locks, no allocation, only lock-free atomics and
// async-signal-safe system calls (write, open, poll, kill, unlinkat...).
// Thread-safety: addTerminationHook/installTerminationHandler from any thread.
#pragma once

namespace zrt {

enum class TerminationPhase { Report, Cleanup };

// `signal` is the signal being handled, or 0 when runTerminationHooks was called directly.
using TerminationHook = void (*)(int signal) noexcept;

// Adds `hook` (once: a hook already added is not added again) and (re)installs the handler.
// Throws Error when the fixed table (16 hooks) is full or the handler cannot be installed.
void addTerminationHook(TerminationPhase phase, TerminationHook hook);

// Installs the handler of the signals above, chaining to whatever is installed now. Called at every
// registration (hooks, cleanup directories): a library or framework that set its own handler
// after ours (MPI, a test runner) is then chained behind ours instead of silently replacing it.
void installTerminationHandler();

// Runs the report hooks (the first time only), then the cleanup hooks. Async-signal-safe.
void runTerminationHooks(int signal) noexcept;

// Deferred stop (a trainer's --save-on-signal): after deferStopSignals() the first SIGINT or
// SIGTERM only records the signal (stopSignal()) and runs no hook; the program stops at its next
// step boundary, saves, and removes its swap directories on the normal exit path. A second
// signal acts as above (hooks, then the previous disposition): an operator in a hurry is not
// held up by the save. SIGUSR1 then also requests the stop (mpirun forwards it to every rank and,
// unlike SIGTERM, keeps the job and its output going); repeating it changes nothing. Throws
// Error when a handler cannot be installed.
void deferStopSignals();
// The first signal (SIGINT, SIGTERM or SIGUSR1) received since deferStopSignals(), or 0;
// async-signal-safe.
int stopSignal() noexcept;

}  // namespace zrt
