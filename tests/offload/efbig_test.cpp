// EFBIG for real: with RLIMIT_FSIZE lowered (and SIGXFSZ ignored, so the kernel answers EFBIG
// instead of killing the process), a write past the limit fails with EFBIG naming the file and
// offset, for both engines; the write below the limit lands.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;

namespace {

// Lowers RLIMIT_FSIZE for this scope and ignores SIGXFSZ.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    previous_ = signal(SIGXFSZ, SIG_IGN);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, previous_);
  }

 private:
  rlimit saved_{};
  sighandler_t previous_{};
};

}  // namespace

TEST_CASE("a write beyond RLIMIT_FSIZE fails with EFBIG") {
  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    for (DirectIo direct : {DirectIo::Auto, DirectIo::Off}) {
      CAPTURE(nameOf(kind));
      CAPTURE(nameOf(direct));
      TempDir dir;
      AioOptions o;
      o.engine = kind;
      o.direct = direct;
      o.block_size = 128 * 1024;
      OffloadEngine engine(o);
      auto opts = engine.fileOptions();
      opts.create = true;
      auto file = engine.open({dir.path() / "f"}, opts);
      AlignedBuffer a(1 << 20);
      fillPattern(a.data(), a.size(), 8);
      FileSizeLimit limit(512 * 1024);
      engine.writeSync(file, 0, a.data(), 512 * 1024);  // up to the limit: fine
      try {
        engine.writeSync(file, 0, a.data(), a.size());
        FAIL("a write past RLIMIT_FSIZE reported success");
      } catch (const zrt::IoError& e) {
        CHECK(e.errnum() == EFBIG);
        const std::string what = e.what();
        CHECK(what.find(std::strerror(EFBIG)) != std::string::npos);
        // The first failing transfer is at or past the limit (transfers run concurrently, so
        // which one fails first varies).
        const auto at = what.find("at offset ");
        REQUIRE(at != std::string::npos);
        const auto offset = std::stoull(what.substr(at + 10));
        CHECK(offset >= 512 * 1024);
        CHECK(offset < 1024 * 1024);
        CHECK(what.find((dir.path() / "f").string()) != std::string::npos);
      }
      AlignedBuffer back(512 * 1024);
      engine.readSync(file, 0, back.data(), back.size());
      CHECK(firstMismatch(back.data(), back.size(), 8) == -1);
    }
  }
}
