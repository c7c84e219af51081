// Deferred stop (core/termination.h, zrt-train's --save-on-signal): in a forked child, with a
// directory in the cleanup registry, the first SIGTERM is only recorded (stopSignal()) and the
// directory stays; the child then exits normally and removes it itself. A second signal cleans
// up and ends the process as without deferral.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/termination.h"
#include "offload/cleanup_registry.h"
#include "offload_test_util.h"

using namespace zrt::offload;
using zrt::deferStopSignals;
using zrt::stopSignal;
using zrt::offload::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Runs `child` in a forked process with SIGTERM at its default; returns its wait status.
template <typename F>
int inChild(F child) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGTERM, SIG_DFL);
    std::_Exit(child());
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("the first signal is recorded and removes nothing; the owner cleans up on the normal path") {
  TempDir base;
  const fs::path dir = fs::path(base.path()) / "swap";
  const int status = inChild([&] {
    fs::create_directory(dir);
    std::ofstream(dir / "state") << "x";
    const int slot = registerCleanupDirectory(dir);
    deferStopSignals();
    if (stopSignal() != 0) return 10;
    ::raise(SIGTERM);  // delivered before raise returns: the handler has run
    if (stopSignal() != SIGTERM) return 11;
    if (!fs::exists(dir / "state")) return 12;
    removeDirectoryFlat(dir.c_str());
    unregisterCleanupDirectory(slot);
    return 0;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("SIGUSR1 requests the stop too, and repeating it changes nothing") {
  const int status = inChild([&] {
    deferStopSignals();
    ::raise(SIGUSR1);
    ::raise(SIGUSR1);
    return stopSignal() == SIGUSR1 ? 0 : 30;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a second signal cleans up and ends the process with that signal") {
  TempDir base;
  const fs::path dir = fs::path(base.path()) / "swap";
  const int status = inChild([&] {
    fs::create_directory(dir);
    std::ofstream(dir / "state") << "x";
    registerCleanupDirectory(dir);
    deferStopSignals();
    ::raise(SIGTERM);
    ::raise(SIGTERM);
    return 20;  // not reached: the second signal ends the process
  });
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(fs::exists(dir));
}
