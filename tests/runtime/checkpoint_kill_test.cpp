// A saving process killed (SIGKILL) at every step of the save protocol, one run per step: after
// each kill the checkpoint `latest` names still loads and every complete checkpoint in the
// directory verifies; the one saved before the first kill always does. The helper process
// (checkpoint_kill_helper) counts protocol steps through runtime/checkpoint/fault_injection.h
// and raises SIGKILL at the K-th; K runs from 1 past the last step, so the final run completes.
// The next load removes the staging directory each killed save left (runtime/checkpoint/staging.h).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/threads/thread_world.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/fault_injection.h"
#include "tests/runtime/checkpoint_test_support_nompi.h"

extern char** environ;

using namespace zrt;
namespace fs = std::filesystem;

namespace {

struct Exit {
  bool killed = false;
  int code = -1;
};

// Runs the helper with ZRT_CHECKPOINT_FAULT=kill:k (k = 0: no fault); waits at most 60 s.
Exit runHelper(const std::string& dir, const std::string& tag, int k) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("ZRT_CHECKPOINT_FAULT=", 0) != 0) env.emplace_back(*e);
  if (k > 0) env.push_back("ZRT_CHECKPOINT_FAULT=kill:" + std::to_string(k));
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = ZRT_KILL_HELPER, steps = "2";
  std::string d = dir, t = tag;
  char* argv[] = {exe.data(), d.data(), t.data(), steps.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    REQUIRE(r >= 0);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("checkpoint_kill_helper did not finish in 60 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Exit e;
  e.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return e;
}

// Every complete checkpoint (a directory with a manifest, not a temporary one) verifies.
void verifyAll(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.find(".tmp-") != std::string::npos) continue;
    CAPTURE(name);
    const checkpoint::CheckpointReader r(e.path().string());
    for (std::size_t i = 0; i < r.manifest().files.size(); ++i) CHECK(r.verifyFile(i) == "");
  }
}

}  // namespace

TEST_CASE("SIGKILL at every step of a save leaves the previous checkpoint loadable and verified") {
  const fs::path dir = fs::temp_directory_path() / ("zrt-ckpt-kill-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  comm::ThreadWorld world(1);
  auto comm = world.connect(0);

  // How many steps one save has (the same model, in this process).
  std::int64_t points = 0;
  {
    test::SoloEngine t(*comm);
    checkpoint::setFaultPlanForTesting({});
    const fs::path probe = dir.string() + "-probe";
    t.engine.save(probe.string(), "probe");
    points = checkpoint::faultPointsSoFar();
    fs::remove_all(probe);
  }
  REQUIRE(points > 10);
  REQUIRE(runHelper(dir.string(), "base", 0).code == 0);

  int killed = 0, completed = 0;
  std::set<std::string> leftUnclaimed;
  std::string previous = "base";
  for (int k = 1; k <= points + 1; ++k) {
    CAPTURE(k);
    const std::string tag = "next" + std::to_string(k);
    const Exit e = runHelper(dir.string(), tag, k);
    if (e.killed) ++killed;
    if (!e.killed) {
      CHECK(e.code == 0);
      ++completed;
    }
    // `latest` moves only to a checkpoint that is complete: the one before, or this one.
    const std::string latest = checkpoint::resolveTag(dir.string(), "");
    const bool movedOrKept = latest == previous || latest == tag;
    CHECK(movedOrKept);
    if (latest == tag) CHECK(fs::exists(dir / tag / "manifest.json"));
    previous = latest;
    verifyAll(dir.string());
    test::SoloEngine fresh(*comm);
    fresh.engine.load(dir.string(), "");
    fresh.engine.load(dir.string(), "base");
    // The load removed the staging directory the killed save left, unless the kill came while
    // it was being claimed (it then holds no owner file, and is left with a warning).
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || name.find(".tmp-") == std::string::npos) continue;
      CAPTURE(name);
      CHECK(!fs::exists(entry.path() / "zrt-staging-owner.json"));
      leftUnclaimed.insert(name);
    }
  }
  CAPTURE(leftUnclaimed.size());
  // Only kills inside the claim itself (between the owner file's temporary being made and its
  // rename: written, synced, closed) leave one.
  CHECK(leftUnclaimed.size() <= 3);
  CHECK(killed == points);
  CHECK(completed == 1);
  CHECK(checkpoint::resolveTag(dir.string(), "") == "next" + std::to_string(points + 1));
  fs::remove_all(dir);
}
