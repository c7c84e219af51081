// ENOSPC for real: a 1 MiB tmpfs mounted in a private temporary directory (tmpfs on Linux 6.6+
// accepts O_DIRECT, so this runs the O_DIRECT path there and the buffered one on older kernels).
// A write that does not fit fails with ENOSPC naming the file and offset; the bytes before it
// read back intact; swap-file preallocation that does not fit fails up front and leaves no
// file behind. Skipped (exit 77) where mounting is not permitted.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload/swap_space.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::ScratchMount;

namespace {

ScratchMount& tinyFs() {
  static std::unique_ptr<ScratchMount> m = [] {
    std::string why;
    auto mount = ScratchMount::tryMount("tmpfs", "size=1M", &why);
    if (!mount) zrt::offload::test::skipProgram(why);
    return mount;
  }();
  return *m;
}

}  // namespace

TEST_CASE("a write past the end of the space fails with ENOSPC, and nothing claims success") {
  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    CAPTURE(nameOf(kind));
    AioOptions o;
    o.engine = kind;
    o.block_size = 256 * 1024;
    o.queue_depth = 2;
    OffloadEngine engine(o);
    auto opts = engine.fileOptions();
    opts.create = true;
    opts.truncate = true;
    const auto path = tinyFs().path() / "big";
    auto file = engine.open({path}, opts);
    constexpr std::size_t kLen = 3 << 20;  // three times the file system
    AlignedBuffer a(kLen);
    fillPattern(a.data(), kLen, 42);
    try {
      engine.writeSync(file, 0, a.data(), kLen);
      FAIL("a 3 MiB write to a 1 MiB file system reported success");
    } catch (const zrt::IoError& e) {
      CHECK(e.errnum() == ENOSPC);
      const std::string what = e.what();
      CHECK(what.find(std::strerror(ENOSPC)) != std::string::npos);
      CHECK(what.find(path.string()) != std::string::npos);
      CHECK(what.find("at offset") != std::string::npos);
      MESSAGE(what);
    }
    // What did land is intact: read back the first block, written before space ran out.
    AlignedBuffer back(256 * 1024);
    engine.readSync(file, 0, back.data(), back.size());
    CHECK(firstMismatch(back.data(), back.size(), 42) == -1);
    file.reset();
    std::filesystem::remove(path);
  }
}

TEST_CASE("swap-file preallocation that does not fit fails up front with ENOSPC") {
  zrt::MemoryLedger ledger;
  SwapSpace space({tinyFs().path()}, ledger, 0, "enospc-test");
  FileOpenOptions opts;
  try {
    auto f = space.create("too-big", 8 << 20, zrt::MemTag::OptimizerState, opts);
    FAIL("reserving 8 MiB on a 1 MiB file system succeeded");
  } catch (const zrt::IoError& e) {
    CHECK(e.errnum() == ENOSPC);
    CHECK(std::string(e.what()).find("free") != std::string::npos);
    MESSAGE(std::string(e.what()));
  }
  CHECK_FALSE(std::filesystem::exists(space.directories()[0] / "too-big"));
  CHECK(ledger.total(zrt::MemPlace::Nvme).current == 0);
  // A file that fits is fine.
  auto ok = space.create("fits", 256 * 1024, zrt::MemTag::OptimizerState, opts);
  CHECK(ledger.total(zrt::MemPlace::Nvme).current == 256 * 1024);
}
