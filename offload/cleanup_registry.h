// The cleanup registry: directories whose files must not outlive the process. Registered
// directories are emptied and removed when the process is ended by SIGINT or SIGTERM, just
// before a deliberate abort (both through core/termination.h: the signal still ends the
// process, and an earlier handler still runs) and at exit() if their owners have not removed
// them first. Swap directories register here.
// kill -9 cannot be caught, so a directory can also name its siblings: at cleanup, sibling
// directories whose names start with the given prefix and carry the owner tag (ownerTag()) of
// a process of this host and PID namespace that has exited are removed too. That is how the
// surviving ranks of a job remove the swap directories of a rank that was SIGKILLed.
// The cleanup is async-signal-safe: a fixed table of slots (64) of lock-free atomics, read like
// a seqlock (a path another thread is rewriting is skipped, never acted on half-written), and
// only open/openat/fstat/getdents64/unlinkat/kill/read system calls, every one relative to a
// directory fd and never following a link in what it removes.
// Thread-safety: registerCleanupDirectory/unregisterCleanupDirectory from any thread.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace zrt::offload {

// Returns a slot id for unregisterCleanupDirectory. `siblingPrefix` (may be empty): also remove
// the exited owners' siblings described above. Installs the termination hook and the atexit
// hook on first use. Throws Error when all slots are taken, a path or prefix is too long, or
// the handlers cannot be installed.
int registerCleanupDirectory(const std::filesystem::path& dir, std::string_view siblingPrefix = {});
void unregisterCleanupDirectory(int slot);

// "p<PID>n<PID namespace>h<host>" for this process, to put in a directory's name between '-'
// separators, just before its mkdtemp suffix: "<prefix>...-<tag>-XXXXXX". The host name keeps
// letters, digits and '.'; anything else becomes '_' (so the tag holds no '-').
std::string ownerTag();

// Removes every entry directly inside `dir` (a link is removed, never followed), then `dir`
// itself; async-signal-safe. `dir`'s last component must be a directory owned by this user, not
// a link: anything else is left alone (EPERM, ELOOP or ENOTDIR). Returns 0 or the first errno
// met (ENOENT counts as success).
int removeDirectoryFlat(const char* dir) noexcept;
// The same for the entry `name` of the directory open at `parentFd` (or AT_FDCWD).
int removeDirectoryAt(int parentFd, const char* name) noexcept;

// Removes the directories in `parent` named "<prefix>...-<tag>-XXXXXX" whose tag names an
// exited process (or a zombie) of this host and PID namespace, other than this one; returns how
// many it removed. A link under such a name, or a directory of another user, is left alone.
// Async-signal-safe.
int removeExitedOwnersDirectories(const char* parent, const char* prefix) noexcept;

}  // namespace zrt::offload
