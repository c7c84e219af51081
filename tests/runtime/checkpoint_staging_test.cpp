// Staging directories of unfinished saves (runtime/checkpoint/staging.h): removeStaleStaging
// removes those whose owner process is gone and the empty ones, and keeps those a running
// process owns, those owned on another host and those without an owner file; it never touches
// a checkpoint or a file.
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/checkpoint/staging.h"

namespace fs = std::filesystem;
using namespace zrt;

namespace {

// The owner file claimStaging writes, with one field changed.
void rewriteOwner(const fs::path& staging, const std::string& key, const std::string& value) {
  const fs::path owner = staging / "zrt-staging-owner.json";
  std::ifstream in(owner);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t at = text.find("\"" + key + "\":");
  REQUIRE(at != std::string::npos);
  const std::size_t end = text.find_first_of(",}", at);
  text.replace(at, end - at, "\"" + key + "\":" + value);
  std::ofstream(owner, std::ios::trunc) << text;
}

}  // namespace

TEST_CASE("stale staging directories are removed; a live job's, another host's and unowned ones stay") {
  const fs::path dir = fs::temp_directory_path() / ("zrt-staging-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto make = [&](const std::string& name) {
    fs::create_directories(dir / name);
    return dir / name;
  };
  const fs::path live = make("a.tmp-aaaaaa");
  checkpoint::claimStaging(live.string());
  const fs::path dead = make("b.tmp-bbbbbb");
  checkpoint::claimStaging(dead.string());
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  rewriteOwner(dead, "pid", std::to_string(child));  // a process that has exited
  const fs::path reused = make("c.tmp-cccccc");
  checkpoint::claimStaging(reused.string());
  rewriteOwner(reused, "start", "\"1\"");  // our pid, another process's start time
  const fs::path remote = make("d.tmp-dddddd");
  checkpoint::claimStaging(remote.string());
  rewriteOwner(remote, "host", "\"elsewhere\"");
  const fs::path unowned = make("e.tmp-eeeeee");
  std::ofstream(unowned / "params.rank00000.bin") << "x";
  const fs::path empty = make("f.tmp-ffffff");
  const fs::path checkpoint = make("step1");
  std::ofstream(dir / "latest.tmp-gggggg") << "step1\n";

  const auto removed = checkpoint::removeStaleStaging(dir.string());
  CHECK(removed.size() == 3);
  CHECK(!fs::exists(dead));
  CHECK(!fs::exists(reused));
  CHECK(!fs::exists(empty));
  CHECK(fs::exists(live / "zrt-staging-owner.json"));
  CHECK(fs::exists(remote));
  CHECK(fs::exists(unowned / "params.rank00000.bin"));
  CHECK(fs::exists(checkpoint));
  CHECK(fs::exists(dir / "latest.tmp-gggggg"));
  checkpoint::releaseStaging(live.string());
  CHECK(!fs::exists(live / "zrt-staging-owner.json"));
  fs::remove_all(dir);
}
