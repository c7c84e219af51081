// The thread-pool fallback: with io_uring_setup blocked by a seccomp filter (as Docker's
// default profile and other sandboxes do), an engine on `auto` warns once and uses the thread
// pool, and every byte still round-trips; an engine that insists on io_uring fails with the
// errno text. The filter cannot be removed, so this program runs nothing else after it, and
// installing it is the first thing the program does, so a skip (exit 77, where seccomp filters
// cannot be installed) hides no result. Forcing the thread pool by option needs no filter and is
// tested by forced_options_test.
#include <doctest/doctest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload/uring_engine.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::StderrCapture;
using zrt::offload::test::TempDir;
using zrt::offload::test::roundTrip;

namespace {

// Makes io_uring_setup fail with ENOSYS for this process from now on.
bool blockIoUring(std::string* why) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    *why = std::string("cannot install a seccomp filter here: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("without io_uring, auto falls back to the thread pool with one warning") {
  std::string why;
  if (!blockIoUring(&why)) zrt::offload::test::skipProgram(why);
  CHECK(probeUring() == ENOSYS);

  std::string warnings;
  {
    StderrCapture capture;
    AioOptions o;
    o.block_size = 256 * 1024;
    OffloadEngine first(o);
    OffloadEngine second(o);
    CHECK(first.kind() == EngineKind::ThreadPool);
    CHECK(second.kind() == EngineKind::ThreadPool);
    roundTrip(first);
    warnings = capture.text();
  }
  CHECK(warnings.find("io_uring is not available") != std::string::npos);
  CHECK(warnings.find("io_uring is not available") == warnings.rfind("io_uring is not available"));

  AioOptions strict;
  strict.engine = EngineKind::IoUring;
  CHECK_THROWS_WITH_AS(OffloadEngine{strict}, doctest::Contains(std::strerror(ENOSYS)),
                       zrt::IoError);
}
