// ENOSPC while the engine lays out its NVMe swap files (offload_optimizer nvme on a 1 MiB tmpfs)
// is reported before training starts, naming the file system's free space and the bytes asked,
// and leaves no swap file behind. One rank (comm/null at world 1); skipped (exit 77), before
// anything runs, where mounting a tmpfs is not permitted.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "comm/null/null_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/offload/offload_test_util.h"

using namespace zrt;

namespace {

offload::test::ScratchMount& tinyFs() {
  static std::unique_ptr<offload::test::ScratchMount> m = [] {
    std::string why;
    auto mount = offload::test::ScratchMount::tryMount("tmpfs", "size=1M", &why);
    if (!mount) offload::test::skipProgram(why);
    return mount;
  }();
  return *m;
}

// Decided before any test case runs.
const bool kMounted = (tinyFs(), true);

}  // namespace

TEST_CASE("swap files that do not fit are refused at set-up, naming the space, leaving nothing") {
  REQUIRE(kMounted);
  comm::NullCommunicator comm(0, 1);
  MemoryLedger ledger;
  auto device = makeDevice("host:256M", ledger);
  // 1M parameters: master, m and v of 4 MB each, on a 1 MiB file system.
  EngineModel model;
  model.modules.push_back({"m", {{"w", {1000, 1000}, init::constant(0.5f)}}});
  const Config c = parseConfig(detail::cat(R"({"train_batch_size": 1, "bf16": {"enabled": true},)",
                                           R"("zero_optimization": {"stage": 3, "offload_optimizer": )",
                                           R"({"device": "nvme", "nvme_path": [")", tinyFs().path().string(),
                                           R"("]}}})"),
                               "enospc.json", 1);
  std::string msg;
  try {
    Engine engine(c, *device, comm, model);
  } catch (const IoError& e) {  // ENOSPC's class, as the rank that hit it threw
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find("set-up failed") != std::string::npos);
  CHECK(msg.find("No space left on device") != std::string::npos);
  CHECK(msg.find(tinyFs().path().string()) != std::string::npos);
  CHECK(msg.find("free") != std::string::npos);
  std::size_t left = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tinyFs().path())) left += e.is_regular_file();
  CHECK(left == 0);
}
