// The cleanup registry: directories whose files must not outlive the process. Registered
// directories are emptied and removed when the process is ended by SIGINT or SIGTERM (the
// handler then restores the previous disposition and re-raises the signal, so the exit status
// still says "killed by SIGTERM" and an earlier handler still runs) and at exit() if their
// owners have not removed them first. Swap directories register here. kill -9 cannot be
// caught: docs/offload.md says how to find leftovers.
// The handler is async-signal-safe: a fixed table of slots (64) of lock-free atomics, read like
// a seqlock (a path another thread is rewriting is skipped, never acted on half-written), and
// only open/getdents64/unlinkat/rmdir system calls. Signals whose disposition is SIG_IGN are left
// alone (they do not end the process).
// Deferred stop (deferStopSignals, for a trainer's --save-on-signal): the first SIGINT/SIGTERM
// only records the signal (stopSignal()) and removes nothing; the program stops at its next step
// boundary, saves, and its owners remove their directories on the normal exit path. A second
// signal acts as above (cleanup, then the previous disposition): an operator in a hurry is not
// held up by the save. SIGUSR1 then also requests the stop (mpirun forwards it to every rank
// and, unlike SIGTERM, keeps the job and its output going); repeating it changes nothing.
// Thread-safety: registerDirectory/unregisterDirectory from any thread.
#pragma once

#include <filesystem>

namespace zrt::offload {

// Returns a slot id for unregisterDirectory. Installs the signal handlers and the atexit hook
// on first use. Throws Error when all slots are taken, the path is too long, or the handlers
// cannot be installed.
int registerCleanupDirectory(const std::filesystem::path& dir);
void unregisterCleanupDirectory(int slot);

// Switches SIGINT/SIGTERM to the deferred stop above (installing the handlers if no directory
// is registered yet). Throws Error as registerCleanupDirectory.
void deferStopSignals();
// The first signal (SIGINT, SIGTERM or SIGUSR1) received since deferStopSignals(), or 0;
// async-signal-safe.
int stopSignal() noexcept;

// Removes every plain file directly inside `dir`, then `dir` itself; async-signal-safe.
// Returns 0 or the first errno met (ENOENT counts as success).
int removeDirectoryFlat(const char* dir) noexcept;

}  // namespace zrt::offload
