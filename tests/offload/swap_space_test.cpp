// Swap files: a private directory per job and rank (0700) under each nvme_path, files 0600 with
// their space reserved (fallocate) and charged to the ledger at MemPlace::Nvme, striped over
// the paths; everything removed when the owners go away, at exit(), and on SIGTERM, SIGINT,
// SIGHUP, SIGUSR1 and SIGUSR2 (a forked child is killed; the signal still ends it, and its
// directory is gone); the directory of a SIGKILLed process removed by the next process of its
// job that cleans up, and never a link planted under such a name, its target, or another
// user's directory.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/cleanup_registry.h"
#include "offload/io_error.h"
#include "offload/offload_engine.h"
#include "offload/swap_space.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;
namespace fs = std::filesystem;

namespace {

unsigned modeOf(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// Forks a child that makes a swap space with a file in `base`, tells the parent the directory
// through a pipe, then waits to be killed by `sig` (or calls exit() when sig is 0). Returns the
// child's directory and wait status.
std::pair<fs::path, int> childWithSwap(const fs::path& base, int sig,
                                       void (*earlierHandler)(int) = nullptr) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    // A plain program: the test runner's own crash handlers are not part of the picture.
    ::signal(SIGTERM, earlierHandler ? earlierHandler : SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    zrt::MemoryLedger ledger;
    // Leaked on purpose: only the registry (signal handler or atexit) may clean up.
    auto* space = new SwapSpace({base}, ledger, 3, "child");
    auto* file = new SwapFile(space->create("state", 1 << 20, zrt::MemTag::OptimizerState, {}));
    (void)file;
    const std::string dir = space->directories()[0].string() + "\n";
    if (::write(fds[1], dir.data(), dir.size()) != static_cast<ssize_t>(dir.size())) std::_Exit(3);
    ::close(fds[1]);
    if (sig == 0) std::exit(0);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  std::string dir;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') dir += c;
  ::close(fds[0]);
  REQUIRE_FALSE(dir.empty());
  if (sig != 0) CHECK(fs::exists(fs::path(dir) / "state"));  // exit() may have run already
  if (sig != 0) ::kill(pid, sig);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return {fs::path(dir), status};
}

}  // namespace

TEST_CASE("private directories, file modes, reserved space and the ledger") {
  TempDir a, b;
  zrt::MemoryLedger ledger;
  {
    SwapSpace space({a.path(), b.path()}, ledger, 2, "job/42 x");
    REQUIRE(space.directories().size() == 2);
    for (const auto& d : space.directories()) {
      CHECK(modeOf(d) == 0700);
      CHECK(d.filename().string().rfind("zrt-swap-job_42_x-rank2-", 0) == 0);
    }
    FileOpenOptions opts;
    opts.stripeUnit = 64 * 1024;
    SwapFile f = space.create("param.0", 1'000'000, zrt::MemTag::Parameters, opts);
    CHECK(f.file()->stripes() == 2);
    for (const auto& d : space.directories()) {
      const fs::path p = d / "param.0";
      CHECK(modeOf(p) == 0600);
      struct stat st {};
      REQUIRE(::stat(p.c_str(), &st) == 0);
      CHECK(st.st_size >= 400'000);                      // each stripe holds about half
      CHECK(static_cast<std::uint64_t>(st.st_blocks) * 512 >= 400'000);  // really reserved
    }
    CHECK(ledger.get(zrt::MemTag::Parameters, zrt::MemPlace::Nvme).current == f.reserved());
    CHECK(f.reserved() >= 1'000'000);

    // The swap file works with the engine.
    AioOptions o;
    o.block_size = 64 * 1024;
    OffloadEngine engine(o);
    AlignedBuffer x(1'000'000), y(1'000'000);
    fillPattern(x.data(), 1'000'000, 4);
    engine.writeSync(f.file(), 0, x.data(), 1'000'000);
    engine.readSync(f.file(), 0, y.data(), 1'000'000);
    CHECK(firstMismatch(y.data(), 1'000'000, 4) == -1);

    CHECK_THROWS_AS(space.create("param.0", 10, zrt::MemTag::Parameters, opts),
                    zrt::InvalidArgument);  // taken; the existing file survives
    CHECK(fs::exists(space.directories()[0] / "param.0"));
    CHECK_THROWS_AS(space.create("../escape", 10, zrt::MemTag::Parameters, opts),
                    zrt::InvalidArgument);

    SwapFile g = space.create("moment.0", 8192, zrt::MemTag::OptimizerState, opts);
    {
      // A move hands the file over: the emptied source removes nothing when it goes away.
      SwapFile moved(std::move(g));
      CHECK(g.bytes() == 0);
      CHECK(g.name().empty());
      CHECK(g.file() == nullptr);
      g = SwapFile();
      g = std::move(moved);
      CHECK(moved.file() == nullptr);
    }
    CHECK(fs::exists(space.directories()[0] / "moment.0"));
    CHECK(g.bytes() == 8192);
    CHECK(ledger.get(zrt::MemTag::OptimizerState, zrt::MemPlace::Nvme).current == g.reserved());
    g = SwapFile();  // move-assigning removes the old file and its charge
    CHECK_FALSE(fs::exists(space.directories()[0] / "moment.0"));
    CHECK(ledger.get(zrt::MemTag::OptimizerState, zrt::MemPlace::Nvme).current == 0);
  }
  CHECK(ledger.total(zrt::MemPlace::Nvme).current == 0);
  CHECK(entries(a.path()) == 0);  // the private directories are gone
  CHECK(entries(b.path()) == 0);
}

TEST_CASE("a missing nvme_path is a clear error") {
  zrt::MemoryLedger ledger;
  CHECK_THROWS_WITH_AS(SwapSpace({"/nonexistent/zrt-nvme"}, ledger, 0),
                       doctest::Contains("/nonexistent/zrt-nvme"), zrt::InvalidArgument);
}

TEST_CASE("two spaces of the same job and rank never share a directory") {
  TempDir a;
  zrt::MemoryLedger ledger;
  SwapSpace s1({a.path()}, ledger, 0, "same");
  SwapSpace s2({a.path()}, ledger, 0, "same");
  CHECK(s1.directories()[0] != s2.directories()[0]);
}

TEST_CASE("SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 remove the swap directory and still end the process") {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) {
    CAPTURE(sig);
    TempDir base;
    auto [dir, status] = childWithSwap(base.path(), sig);
    CHECK(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == sig);
    CHECK_FALSE(fs::exists(dir));
    CHECK(entries(base.path()) == 0);
  }
}

TEST_CASE("a handler installed before the swap space still runs, after the cleanup") {
  TempDir base;
  auto [dir, status] = childWithSwap(base.path(), SIGTERM, [](int) { ::_exit(42); });
  CHECK(WIFEXITED(status));
  if (WIFEXITED(status)) CHECK(WEXITSTATUS(status) == 42);
  CHECK_FALSE(fs::exists(dir));
}

namespace {
volatile sig_atomic_t gUsr1Seen = 0;
}  // namespace

TEST_CASE("a program that handles SIGUSR1 itself keeps the signal and its swap files") {
  TempDir base;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGUSR1, [](int) { gUsr1Seen = 1; });
    zrt::MemoryLedger ledger;
    SwapSpace space({base.path()}, ledger, 0, "own-usr1");
    SwapFile file = space.create("state", 1 << 20, zrt::MemTag::OptimizerState, {});
    ::raise(SIGUSR1);
    const bool kept = gUsr1Seen == 1 && fs::exists(space.directories()[0] / "state");
    std::_Exit(kept ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("exit() without destructors removes the swap directory") {
  TempDir base;
  auto [dir, status] = childWithSwap(base.path(), 0);
  CHECK(WIFEXITED(status));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("removeDirectoryFlat empties and removes a directory, and ignores a missing one") {
  TempDir base;
  const fs::path d = base.path() / "d";
  fs::create_directory(d);
  for (int i = 0; i < 300; ++i) std::fclose(std::fopen((d / std::to_string(i)).c_str(), "w"));
  CHECK(removeDirectoryFlat(d.c_str()) == 0);
  CHECK_FALSE(fs::exists(d));
  CHECK(removeDirectoryFlat(d.c_str()) == 0);
}

namespace {

// A pid that no longer runs: a child that exited and was collected.
pid_t exitedPid() {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}

// ownerTag() with another pid in place of this process's.
std::string tagOf(pid_t pid) {
  const std::string mine = ownerTag();  // "p<pid>n<ns>h<host>"
  return "p" + std::to_string(pid) + mine.substr(mine.find('n'));
}

}  // namespace

TEST_CASE("the owner tag names this process, its PID namespace and host, without '-'") {
  const std::string tag = ownerTag();
  CHECK(tag.rfind("p" + std::to_string(::getpid()) + "n", 0) == 0);
  CHECK(tag.find('h') != std::string::npos);
  CHECK(tag.find('-') == std::string::npos);
  CHECK(tag.find('/') == std::string::npos);
}

TEST_CASE("only the directories of exited owners of this host and job are removed") {
  TempDir base;
  const std::string job = "zrt-swap-job7-rank";
  const pid_t dead = exitedPid();
  const std::vector<std::pair<std::string, bool>> dirs = {
      {job + "0-" + tagOf(dead) + "-Ab3dE9", true},                    // its owner exited: removed
      {job + "1-" + tagOf(::getpid()) + "-Ab3dE9", false},             // this process
      {job + "2-" + tagOf(::getppid()) + "-Ab3dE9", false},            // a live process
      {"zrt-swap-job8-rank0-" + tagOf(dead) + "-Ab3dE9", false},       // another job
      {job + "3-p" + std::to_string(dead) + "n1hother.host-Ab3dE9", false},  // another namespace and host
      {job + "4-" + tagOf(dead), false},                               // no mkdtemp suffix
      {job + "5-" + tagOf(dead) + "x-Ab3dE9", false},                  // a malformed tag
  };
  for (const auto& [name, gone] : dirs) {
    fs::create_directory(base.path() / name);
    std::fclose(std::fopen((base.path() / name / "state").c_str(), "w"));
  }
  CHECK(removeExitedOwnersDirectories(base.path().c_str(), job.c_str()) == 1);
  for (const auto& entry : dirs) {
    const std::string& name = entry.first;  // clang 14: CAPTURE's lambda cannot capture a binding
    const bool gone = entry.second;
    CAPTURE(name);
    CHECK(fs::exists(base.path() / name) == !gone);
  }
}

TEST_CASE("a rank's SIGTERM cleanup also removes the swap directory of a SIGKILLed rank of its job") {
  TempDir base;
  // SIGKILL cannot be caught: the first child's directory stays behind...
  auto [killedDir, killedStatus] = childWithSwap(base.path(), SIGKILL);
  CHECK(WIFSIGNALED(killedStatus));
  REQUIRE(fs::exists(killedDir));
  // ...until another process of the same job ends by SIGTERM (as mpirun ends the others).
  auto [dir, status] = childWithSwap(base.path(), SIGTERM);
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(fs::exists(dir));
  CHECK_FALSE(fs::exists(killedDir));
  CHECK(entries(base.path()) == 0);
}

namespace {

// A directory outside the swap area with files a hostile link would have the cleanup delete.
struct Victim {
  TempDir dir;
  Victim() {
    for (const char* name : {"a", "b", "c"}) std::fclose(std::fopen((dir.path() / name).c_str(), "w"));
  }
  bool intact() const { return entries(dir.path()) == 3; }
};

}  // namespace

TEST_CASE("the sweep never follows a link planted under a dead rank's directory name") {
  TempDir base;
  Victim victim;
  // What a hostile user plants: a link named like the directory of a dead rank of the job.
  const fs::path link = base.path() / ("zrt-swap-child-rank7-" + tagOf(exitedPid()) + "-AAAAAA");
  fs::create_directory_symlink(victim.dir.path(), link);
  CHECK(removeExitedOwnersDirectories(base.path().c_str(), "zrt-swap-child-rank") == 0);
  CHECK(victim.intact());
  const int refused = removeDirectoryFlat(link.c_str());  // O_DIRECTORY|O_NOFOLLOW: ENOTDIR on Linux
  CHECK((refused == ENOTDIR || refused == ELOOP));
  CHECK(victim.intact());
  // And through the signal-time cleanup of a rank of that job, as on kill -9 of a peer.
  auto [dir, status] = childWithSwap(base.path(), SIGTERM);
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(fs::exists(dir));
  CHECK(victim.intact());
  CHECK(fs::is_symlink(link));
}

TEST_CASE("the sweep removes a dead rank's links, never their targets") {
  TempDir base;
  Victim victim;
  const fs::path dead = base.path() / ("zrt-swap-job7-rank0-" + tagOf(exitedPid()) + "-Ab3dE9");
  fs::create_directory(dead);
  fs::create_symlink(victim.dir.path() / "a", dead / "state");
  fs::create_directory_symlink(victim.dir.path(), dead / "dir");
  CHECK(removeExitedOwnersDirectories(base.path().c_str(), "zrt-swap-job7-rank") == 1);
  CHECK_FALSE(fs::exists(dead));
  CHECK(victim.intact());
}

// Making another user's directory needs root (CI's user); elsewhere the case checks nothing and
// says so.
TEST_CASE("the sweep leaves another user's directory alone") {
  if (::geteuid() != 0) {
    MESSAGE("not root: cannot make another user's directory, nothing checked");
    return;
  }
  TempDir base;
  const fs::path other = base.path() / ("zrt-swap-job7-rank0-" + tagOf(exitedPid()) + "-Ab3dE9");
  fs::create_directory(other);
  std::fclose(std::fopen((other / "state").c_str(), "w"));
  REQUIRE(::chown(other.c_str(), 65534, 65534) == 0);
  CHECK(removeExitedOwnersDirectories(base.path().c_str(), "zrt-swap-job7-rank") == 0);
  CHECK(fs::exists(other / "state"));
  CHECK(removeDirectoryFlat(other.c_str()) == EPERM);
  CHECK(fs::exists(other / "state"));
}

TEST_CASE("a link planted where a swap file goes is refused, its target untouched") {
  TempDir base;
  Victim victim;
  zrt::MemoryLedger ledger;
  SwapSpace space({base.path()}, ledger, 0, "job");
  fs::create_symlink(victim.dir.path() / "a", space.directories()[0] / "state");
  // Exclusive, as every swap file is created.
  try {
    space.create("state", 1 << 20, zrt::MemTag::OptimizerState, {});
    FAIL("the planted link was accepted");
  } catch (const zrt::Error& e) {
    CHECK(std::string(e.what()).find("already exists") != std::string::npos);
  }
  CHECK(fs::file_size(victim.dir.path() / "a") == 0);
  // Without O_EXCL (as the buffered retry opens), O_NOFOLLOW still refuses the link.
  for (DirectIo direct : {DirectIo::Auto, DirectIo::Off}) {
    FileOpenOptions o;
    o.create = true;
    o.direct = direct;
    try {
      OffloadFile::open({space.directories()[0] / "state"}, o);
      FAIL("the planted link was opened");
    } catch (const zrt::IoError& e) {
      CHECK(e.errnum() == ELOOP);
      CHECK(std::string(e.what()).find("symbolic link") != std::string::npos);
    }
  }
  CHECK(fs::file_size(victim.dir.path() / "a") == 0);
  CHECK(victim.intact());
}
