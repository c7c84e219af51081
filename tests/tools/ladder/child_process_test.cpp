// The child process runner: exit status and output captured, a child past its time limit ended
// with everything it started, a missing program reported, and command lines quoted for a shell.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tools/ladder/child_process.h"

using namespace zrt;
using namespace zrt::ladder;
using namespace std::chrono_literals;

namespace {

std::string privateFile(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("zrt_ladder_child_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a child's exit status and its stdout and stderr are captured") {
  const std::string out = privateFile("out");
  ChildProcess child({"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, out);
  const ProcessResult r = child.wait(30s);
  CHECK(r.exited);
  CHECK(r.exitCode == 3);
  CHECK(!r.ok());
  CHECK(!r.timedOut);
  CHECK(r.describe() == "exit 3");
  const std::string text = readAll(out);
  CHECK(text.find("to-stdout\n") != std::string::npos);
  CHECK(text.find("to-stderr\n") != std::string::npos);
  std::filesystem::remove(out);
  ChildProcess ok({"true"}, out);
  CHECK(ok.wait(30s).ok());
  std::filesystem::remove(out);
}

TEST_CASE("a child past its time limit is ended with the processes it started") {
  const std::string out = privateFile("slow");
  const std::string pidFile = privateFile("grandchild");
  // The grandchild (sleep) writes its pid, then both wait far longer than the limit.
  const auto t0 = std::chrono::steady_clock::now();
  ChildProcess child({"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, out);
  const ProcessResult r = child.wait(300ms, 2s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.timedOut);
  CHECK(!r.ok());
  CHECK(r.describe().starts_with("timed out after"));
  CHECK(seconds < 10);
  std::string pid = readAll(pidFile);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  REQUIRE(!pid.empty());
  // The grandchild got the group's signal: it is gone, or a zombie waiting for whoever inherited
  // it (a container's init may never reap it). Polls for that, at most 5 s.
  const pid_t g = static_cast<pid_t>(std::stol(pid));
  auto ended = [g] {
    if (::kill(g, 0) != 0) return true;
    const std::string stat = readAll("/proc/" + std::to_string(g) + "/stat");
    const std::size_t paren = stat.rfind(')');  // "pid (comm) S ...": the state after the name
    return paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'Z';
  };
  bool gone = false;
  for (int i = 0; i < 250 && !(gone = ended()); ++i) ::usleep(20'000);
  CHECK(gone);
  std::filesystem::remove(out);
  std::filesystem::remove(pidFile);
}

TEST_CASE("a program that does not exist is an error naming it") {
  const std::string out = privateFile("missing");
  // posix_spawnp reports a missing program either at once or as exit 127 from the child.
  try {
    ChildProcess child({"zrt-ladder-test-no-such-program"}, out);
    const ProcessResult r = child.wait(30s);
    CHECK(r.exited);
    CHECK(r.exitCode == 127);
  } catch (const IoError& e) {
    CHECK(std::string(e.what()).find("zrt-ladder-test-no-such-program") != std::string::npos);
  }
  std::filesystem::remove(out);
}

TEST_CASE("command lines are quoted where a shell would split them") {
  CHECK(commandLine({"mpirun", "-np", "2", "/bin/zrt-train"}) == "mpirun -np 2 /bin/zrt-train");
  CHECK(commandLine({"a b", "it's", ""}) == "'a b' 'it'\\''s' ''");
  CHECK(commandLine({"x+y,z=1"}) == "x+y,z=1");
}
