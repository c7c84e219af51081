// The buffered-I/O fallback: on a file system without O_DIRECT (a ramfs mounted in a private
// temporary directory) the engine warns once and uses buffered I/O, with any buffer alignment;
// asking for O_DIRECT there is an error naming the path. Skipped (exit 77) where mounting is not
// permitted; the mount is the first thing the program does, so a skip hides no result. Forcing
// buffered I/O by option needs no mount and is tested by forced_options_test.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::ScratchMount;
using zrt::offload::test::StderrCapture;

namespace {

void roundTripUnaligned(OffloadEngine& engine, const std::shared_ptr<OffloadFile>& file) {
  // Buffered I/O needs no alignment: odd addresses, odd offsets, odd lengths.
  std::vector<unsigned char> a(300001), b(300001);
  fillPattern(a.data() + 1, 300000, 5);
  engine.writeSync(file, 12345, a.data() + 1, 300000);
  engine.readSync(file, 12345, b.data() + 1, 300000);
  CHECK(firstMismatch(b.data() + 1, 300000, 5) == -1);
}

}  // namespace

TEST_CASE("a file system without O_DIRECT falls back to buffered I/O with one warning") {
  std::string why;
  auto ramfs = ScratchMount::tryMount("ramfs", "", &why);
  if (!ramfs) zrt::offload::test::skipProgram(why);

  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    CAPTURE(nameOf(kind));
    AioOptions o;
    o.engine = kind;
    o.block_size = 64 * 1024;
    OffloadEngine engine(o);
    auto opts = engine.fileOptions();
    opts.create = true;
    opts.exclusive = true;
    std::string warnings;
    std::shared_ptr<OffloadFile> a, b;
    {
      StderrCapture capture;
      a = engine.open({ramfs->path() / (std::string("a-") + std::string(nameOf(kind)))}, opts);
      b = engine.open({ramfs->path() / (std::string("b-") + std::string(nameOf(kind)))}, opts);
      warnings = capture.text();
    }
    CHECK_FALSE(a->anyDirect());
    CHECK_FALSE(b->anyDirect());
    if (kind == EngineKind::IoUring) {
      // Once per directory and process: the first engine's opens warned, the second's did not.
      CHECK(warnings.find("does not support O_DIRECT") != std::string::npos);
      CHECK(warnings.find("does not support O_DIRECT") == warnings.rfind("does not support O_DIRECT"));
    } else {
      CHECK(warnings.find("does not support O_DIRECT") == std::string::npos);
    }
    roundTripUnaligned(engine, a);
    AlignedBuffer big(5 << 20), back(5 << 20);
    fillPattern(big.data(), big.size(), 6);
    engine.writeSync(b, 0, big.data(), big.size());
    engine.readSync(b, 0, back.data(), back.size());
    CHECK(firstMismatch(back.data(), back.size(), 6) == -1);
  }

  FileOpenOptions strict;
  strict.direct = DirectIo::On;
  strict.create = true;
  CHECK_THROWS_WITH_AS(OffloadFile::open(ramfs->path() / "strict", strict),
                       doctest::Contains("does not support direct I/O"), zrt::IoError);
}
