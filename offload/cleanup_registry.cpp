#include "offload/cleanup_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/termination.h"

namespace zrt::offload {
namespace {

enum SlotState : int { kFree = 0, kWriting = 1, kActive = 2 };
constexpr std::size_t kMaxPrefix = 256;

// A slot's path may be rewritten by another thread (unregister, then a new registration) while
// the signal handler reads it. The handler reads it like a seqlock: it copies the path, then
// checks that the slot is still active under the same generation, and removes nothing it could
// have read half-written. The characters are atomics so those reads are not data races.
struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<unsigned> generation{0};  // bumped after each registration's path is written,
                                        // and at each unregistration
  std::array<std::atomic<char>, PATH_MAX> path{};
  std::array<std::atomic<char>, kMaxPrefix> siblingPrefix{};  // "" when none
};
static_assert(std::atomic<char>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<unsigned>::is_always_lock_free,
              "the signal handler may only touch lock-free atomics");

constexpr int kSlots = 64;
std::array<Slot, kSlots> gSlots;

// "n<PID namespace>h<host>": the part of ownerTag() every process of this host and namespace
// shares. Written once, before the first slot is activated (whose release store publishes it).
char gHostTag[128] = "";

// linux_dirent64 as getdents64 fills it (glibc has no wrapper before 2.30's getdents64).
struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// Copies an atomic char array up to its NUL into `out` (size n); true unless it was cut short.
template <std::size_t N>
bool copyOut(const std::array<std::atomic<char>, N>& in, char* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 1 < n && i < N; ++i) {
    out[i] = in[i].load(std::memory_order_relaxed);
    if (out[i] == '\0') return true;
  }
  out[i] = '\0';
  return false;
}

// Appends `s` to `out` (capacity n, currently at *len); false when it does not fit.
bool append(char* out, std::size_t n, std::size_t* len, const char* s) noexcept {
  const std::size_t k = std::strlen(s);
  if (*len + k + 1 > n) return false;
  std::memcpy(out + *len, s, k + 1);
  *len += k;
  return true;
}

bool appendUnsigned(char* out, std::size_t n, std::size_t* len, unsigned long v) noexcept {
  char digits[24];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char s[24];
  for (int i = 0; i < d; ++i) s[i] = digits[d - 1 - i];
  s[d] = '\0';
  return append(out, n, len, s);
}

// Whether `pid` may still run: not when kill() says it does not exist, nor when /proc shows a
// zombie (exited; its parent has not collected it yet). Anything unclear counts as running.
bool processRuns(pid_t pid) noexcept {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::size_t len = 0;
  if (!append(path, sizeof path, &len, "/proc/") || !appendUnsigned(path, sizeof path, &len, static_cast<unsigned long>(pid)) ||
      !append(path, sizeof path, &len, "/stat"))
    return true;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // "<pid> (<comm>) <state> ...": the command may hold ')' itself, so the last one ends it.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ') return true;
  return close[2] != 'Z' && close[2] != 'X';
}

// The owner's pid when `name` is "<prefix>...-p<PID><host tag>-XXXXXX" with this host's tag,
// else 0.
pid_t exitedCandidate(const char* name, const char* prefix) noexcept {
  const std::size_t len = std::strlen(name), plen = std::strlen(prefix);
  if (plen == 0 || len < plen + 8 || std::strncmp(name, prefix, plen) != 0) return 0;
  if (name[len - 7] != '-') return 0;  // "-XXXXXX", mkdtemp's suffix
  // The tag runs from the last '-' before the suffix.
  std::size_t tag = len - 7;
  while (tag > plen && name[tag - 1] != '-') --tag;
  if (tag == plen || name[tag] != 'p') return 0;
  std::size_t i = tag + 1;
  unsigned long pid = 0;
  for (; i < len - 7 && name[i] >= '0' && name[i] <= '9'; ++i) {
    pid = pid * 10 + static_cast<unsigned long>(name[i] - '0');
    if (pid > 0x7fffffff) return 0;
  }
  if (i == tag + 1 || pid == 0) return 0;
  const std::size_t hostLen = std::strlen(gHostTag);
  if (hostLen == 0 || len - 7 - i != hostLen || std::strncmp(name + i, gHostTag, hostLen) != 0) return 0;
  return static_cast<pid_t>(pid);
}

// Async-signal-safe: lock-free atomics, stack copies, and the system calls named above.
void cleanupAll() noexcept {
  char path[PATH_MAX];
  char prefix[kMaxPrefix];
  for (auto& slot : gSlots) {
    if (slot.state.load(std::memory_order_acquire) != kActive) continue;
    const unsigned generation = slot.generation.load(std::memory_order_acquire);
    copyOut(slot.path, path, sizeof path);
    copyOut(slot.siblingPrefix, prefix, sizeof prefix);
    std::atomic_thread_fence(std::memory_order_acquire);
    // Rewritten meanwhile (unregistered, maybe registered again): the copy may be torn.
    if (slot.state.load(std::memory_order_relaxed) != kActive ||
        slot.generation.load(std::memory_order_relaxed) != generation)
      continue;
    if (prefix[0] != '\0') {
      char* slash = std::strrchr(path, '/');
      if (slash != nullptr && slash != path) {
        *slash = '\0';
        removeExitedOwnersDirectories(path, prefix);
        *slash = '/';
      }
    }
    removeDirectoryFlat(path);
  }
}

void onTermination(int) noexcept { cleanupAll(); }
void atExit() { cleanupAll(); }

std::string sanitizedHost() {
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string out;
  for (const char* c = host; *c != '\0' && out.size() < 64; ++c) {
    const bool keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.';
    out += keep ? *c : '_';
  }
  return out.empty() ? std::string("unknown") : out;
}

// The PID namespace's inode ("pid:[4026531836]" -> 4026531836): pids mean something only
// inside one namespace, so another container's directories are never judged by ours.
std::string pidNamespace() {
  char link[64] = "";
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return "0";
  link[n] = '\0';
  std::string out;
  for (const char* c = link; *c != '\0'; ++c)
    if (*c >= '0' && *c <= '9') out += *c;
  return out.empty() ? std::string("0") : out;
}

const std::string& hostTag() {
  static const std::string tag = "n" + pidNamespace() + "h" + sanitizedHost();
  return tag;
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string& tag = hostTag();
    ZRT_ENFORCE(tag.size() < sizeof gHostTag, "host tag too long: ", tag);
    std::memcpy(gHostTag, tag.c_str(), tag.size() + 1);
    if (std::atexit(atExit) != 0)
      ZRT_THROW(Error, "cleanup registry: atexit() refused the swap-directory cleanup hook");
  });
  // At every registration: re-chains ahead of a handler installed since (termination.h).
  addTerminationHook(TerminationPhase::Cleanup, onTermination);
}

}  // namespace

std::string ownerTag() { return "p" + std::to_string(::getpid()) + hostTag(); }

int removeDirectoryFlat(const char* dir) noexcept {
  // The last component is ours; the directories above it are the user's (nvme_path may well be
  // a link to a scratch disk), so only the last one is opened without following links.
  char parent[PATH_MAX];
  std::size_t len = 0;
  if (!append(parent, sizeof parent, &len, dir)) return ENAMETOOLONG;
  while (len > 1 && parent[len - 1] == '/') parent[--len] = '\0';
  char* slash = std::strrchr(parent, '/');
  const char* name = parent;
  int pfd = AT_FDCWD;
  if (slash != nullptr) {
    name = slash + 1;
    if (slash == parent) {
      pfd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else {
      *slash = '\0';
      pfd = ::open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (pfd < 0) return errno == ENOENT ? 0 : errno;
  }
  const int err = removeDirectoryAt(pfd, name);
  if (pfd != AT_FDCWD) ::close(pfd);
  return err;
}

int removeDirectoryAt(int parentFd, const char* name) noexcept {
  if (name[0] == '\0' || std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0 ||
      std::strchr(name, '/') != nullptr)
    return EINVAL;
  // O_NOFOLLOW: a link planted under a swap directory's name must never lead the removal into
  // the directory it points to (O_DIRECTORY alone would follow it).
  const int dfd = ::openat(parentFd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return errno == ENOENT ? 0 : errno;
  struct stat st {};
  if (::fstat(dfd, &st) != 0) {
    const int err = errno;
    ::close(dfd);
    return err;
  }
  // Only a directory this user owns is emptied: another user's look-alike is not ours to remove.
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(dfd);
    return EPERM;
  }
  int first = 0;
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
      // unlinkat without AT_REMOVEDIR removes a link itself, never its target, and refuses a
      // subdirectory (the swap directories are flat).
      if (::unlinkat(dfd, d->name, 0) != 0 && errno != ENOENT && first == 0) first = errno;
    }
  }
  ::close(dfd);
  if (::unlinkat(parentFd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && first == 0) first = errno;
  return first;
}

int removeExitedOwnersDirectories(const char* parent, const char* prefix) noexcept {
  const int dfd = ::open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return 0;
  const pid_t self = ::getpid();
  int removed = 0;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dfd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long pos = 0; pos < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + pos);
      pos += d->reclen;
      // A link is never a swap directory, whatever its name says (removeDirectoryAt refuses it
      // too, whatever the file system reports here).
      if (d->type == DT_LNK) continue;
      const pid_t owner = exitedCandidate(d->name, prefix);
      if (owner == 0 || owner == self || processRuns(owner)) continue;
      // Removing entries while reading the directory is allowed; one may be seen twice or not
      // at all, and the other ranks sweep too.
      if (removeDirectoryAt(dfd, d->name) == 0) ++removed;
    }
  }
  ::close(dfd);
  return removed;
}

int registerCleanupDirectory(const std::filesystem::path& dir, std::string_view siblingPrefix) {
  const std::string s = dir.string();
  if (s.size() >= PATH_MAX) ZRT_THROW(Error, "cleanup registry: path too long: ", s);
  if (siblingPrefix.size() >= kMaxPrefix)
    ZRT_THROW(Error, "cleanup registry: sibling prefix too long: ", siblingPrefix);
  install();
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    Slot& slot = gSlots[static_cast<std::size_t>(i)];
    if (slot.state.compare_exchange_strong(expected, kWriting)) {
      for (std::size_t k = 0; k <= s.size(); ++k)
        slot.path[k].store(s.c_str()[k], std::memory_order_relaxed);
      for (std::size_t k = 0; k < siblingPrefix.size(); ++k)
        slot.siblingPrefix[k].store(siblingPrefix[k], std::memory_order_relaxed);
      slot.siblingPrefix[siblingPrefix.size()].store('\0', std::memory_order_relaxed);
      slot.generation.fetch_add(1, std::memory_order_release);
      slot.state.store(kActive, std::memory_order_release);
      return i;
    }
  }
  ZRT_THROW(Error, "cleanup registry: all ", kSlots, " slots in use; cannot register ", s);
}

void unregisterCleanupDirectory(int slot) {
  ZRT_ENFORCE(slot >= 0 && slot < kSlots, "bad cleanup slot ", slot);
  Slot& s = gSlots[static_cast<std::size_t>(slot)];
  s.generation.fetch_add(1, std::memory_order_acq_rel);
  s.state.store(kFree, std::memory_order_release);
}

}  // namespace zrt::offload
