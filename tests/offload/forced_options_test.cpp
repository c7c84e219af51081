// What the options force, on any machine (no privilege needed): buffered I/O on a file system
// that has O_DIRECT, with any buffer alignment, and the thread-pool engine with io_uring
// available. The fallbacks that happen without being asked (a file system without O_DIRECT,
// io_uring blocked) need root and are tested by buffered_fallback_test and uring_fallback_test.
#include <doctest/doctest.h>

#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;
using zrt::offload::test::roundTrip;

TEST_CASE("forced buffered I/O on a file system that has O_DIRECT") {
  TempDir dir;
  AioOptions o;
  o.direct = DirectIo::Off;
  o.block_size = 64 * 1024;
  OffloadEngine engine(o);
  auto opts = engine.fileOptions();
  opts.create = true;
  auto file = engine.open({dir.path() / "f"}, opts);
  CHECK_FALSE(file->anyDirect());
  CHECK(file->alignment() == 1);
  // Buffered I/O needs no alignment: odd addresses, odd offsets, odd lengths.
  std::vector<unsigned char> a(300001), b(300001);
  fillPattern(a.data() + 1, 300000, 5);
  engine.writeSync(file, 12345, a.data() + 1, 300000);
  engine.readSync(file, 12345, b.data() + 1, 300000);
  CHECK(firstMismatch(b.data() + 1, 300000, 5) == -1);
}

TEST_CASE("the thread-pool engine forced by option, with io_uring available") {
  AioOptions o;
  o.engine = EngineKind::ThreadPool;
  o.block_size = 256 * 1024;
  o.intra_op_parallelism = 2;
  OffloadEngine engine(o);
  CHECK(engine.kind() == EngineKind::ThreadPool);
  roundTrip(engine);
}
