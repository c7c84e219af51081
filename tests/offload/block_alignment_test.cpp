// block_size below or across the drive's logical block size: on a 4 KiB-sector drive (a loop
// device with 4096-byte sectors, ext4 on it) an O_DIRECT engine asked for 512-byte or 6 KiB
// blocks must still move every byte, with transfers the kernel accepts (whole 4 KiB blocks),
// for io_uring and the thread pool, including tails. Skipped (exit 77) without loop devices.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::LoopMount;

TEST_CASE("block sizes that are not multiples of a 4 KiB sector still work under O_DIRECT") {
  std::string why;
  auto disk = LoopMount::tryMount(4096, 64 << 20, &why);
  if (!disk) zrt::offload::test::skipProgram(why);

  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    for (std::uint64_t block : {std::uint64_t{512}, std::uint64_t{6144}, std::uint64_t{65536}}) {
      CAPTURE(nameOf(kind));
      CAPTURE(block);
      AioOptions o;
      o.engine = kind;
      o.direct = DirectIo::On;
      o.block_size = block;
      o.queue_depth = 4;
      OffloadEngine engine(o);
      auto opts = engine.fileOptions();
      opts.create = true;
      opts.truncate = true;
      auto file = engine.open({disk->path() / "data"}, opts);
      REQUIRE(file->anyDirect());
      REQUIRE(file->alignment() == 4096);

      // Whole blocks, a tail, and a request shorter than one sector.
      for (std::size_t len : {std::size_t{12288}, std::size_t{100000}, std::size_t{1000}}) {
        CAPTURE(len);
        AlignedBuffer out(len + 4096), in(len + 4096);
        fillPattern(out.data(), len, len + block);
        engine.resetStats();
        engine.writeSync(file, 8192, out.data(), len);
        engine.readSync(file, 8192, in.data(), len);
        CHECK(firstMismatch(in.data(), len, len + block) == -1);
        const EngineStats s = engine.stats();
        CHECK(s.failures == 0);
        // Transfers of whole sectors: never more than one per started 4 KiB block.
        CHECK(s.transfers <= 2 * ((len + 4095) / 4096));
      }
    }
  }
}
