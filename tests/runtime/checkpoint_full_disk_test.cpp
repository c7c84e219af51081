// A really full disk under a save: checkpoints saved one after another on a 64 KiB tmpfs until
// one fails. The failure says "No space left on device", `latest` still names the last good
// checkpoint, which verifies and loads, and no temporary directory is left. One rank (a thread
// world of one; the injected ENOSPC of checkpoint_faults_test covers several ranks). Skipped
// (exit 77), before anything runs, where mounting a tmpfs is not permitted.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "comm/threads/thread_world.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "tests/offload/offload_test_util.h"
#include "tests/runtime/checkpoint_test_support_nompi.h"

using namespace zrt;
namespace fs = std::filesystem;

namespace {

offload::test::ScratchMount& tinyFs() {
  static std::unique_ptr<offload::test::ScratchMount> m = [] {
    std::string why;
    auto mount = offload::test::ScratchMount::tryMount("tmpfs", "size=64k,mode=0700", &why);
    if (!mount) offload::test::skipProgram(why);
    return mount;
  }();
  return *m;
}

// Decided before any test case runs.
const bool kMounted = (tinyFs(), true);

}  // namespace

TEST_CASE(
    "saves until a 64 KiB tmpfs is full: a clear error, `latest` the last good one, no temporary "
    "directory") {
  REQUIRE(kMounted);
  const std::string mnt = tinyFs().path().string();
  comm::ThreadWorld world(1);
  auto comm = world.connect(0);
  test::SoloEngine t(*comm);
  test::train(t.engine, *comm, 1, 2);
  // Save until the disk is full: every page-sized file takes a 4 KiB page of the 64 KiB.
  std::string lastGood, failure;
  for (int i = 0; i < 20 && failure.empty(); ++i) {
    const std::string tag = "s" + std::to_string(i);
    try {
      t.engine.save(mnt, tag);
      lastGood = tag;
    } catch (const IoError& e) {
      failure = e.what();
    }
  }
  CAPTURE(failure);
  CHECK(!lastGood.empty());
  CHECK(failure.find("No space left on device") != std::string::npos);
  CHECK(checkpoint::resolveTag(mnt, "") == lastGood);
  for (const auto& e : fs::directory_iterator(mnt))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  const checkpoint::CheckpointReader r(mnt + "/" + lastGood);
  for (std::size_t i = 0; i < r.manifest().files.size(); ++i) CHECK(r.verifyFile(i) == "");
  t.engine.load(mnt, "");
}
