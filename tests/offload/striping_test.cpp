// Striping over several directories: the stripe arithmetic against a byte-by-byte reference,
// and a large request through the engine landing in each stripe file exactly where the
// round-robin layout says (checked by reading the stripe files directly with pread), with
// tails and offsets that do not start on a stripe boundary.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"
#include "offload_test_util.h"
#include "core/error.h"

using namespace zrt::offload;
using zrt::offload::test::fillPattern;
using zrt::offload::test::firstMismatch;
using zrt::offload::test::TempDir;

TEST_CASE("stripe arithmetic matches a byte-by-byte round-robin reference") {
  for (std::size_t stripes : {1u, 2u, 3u, 5u}) {
    for (std::uint64_t unit : {4096u, 65536u}) {
      CAPTURE(stripes);
      CAPTURE(unit);
      const std::uint64_t total = unit * stripes * 3 + unit / 2 + 7;
      std::vector<std::uint64_t> next(stripes, 0);  // reference: next offset in each stripe
      std::uint64_t off = 0;
      while (off < total) {
        const StripeLocation loc = locateStripe(off, stripes, unit);
        const std::size_t want = stripes == 1 ? 0 : (off / unit) % stripes;
        REQUIRE(loc.stripe == want);
        REQUIRE(loc.fileOffset == next[want]);
        const std::uint64_t step = std::min<std::uint64_t>(
            {loc.contiguous, total - off, 1000});  // walk in odd steps
        next[want] += step;
        off += step;
      }
      std::uint64_t sum = 0;
      for (std::size_t s = 0; s < stripes; ++s) {
        CHECK(stripeLength(total, stripes, unit, s) == next[s]);
        sum += stripeLength(total, stripes, unit, s);
      }
      CHECK(sum == total);
    }
  }
}

TEST_CASE("a large request spreads over the stripe files as the layout says") {
  constexpr std::size_t kStripes = 3;
  constexpr std::uint64_t kUnit = 64 * 1024;
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::filesystem::path> paths;
  for (std::size_t i = 0; i < kStripes; ++i) {
    dirs.push_back(std::make_unique<TempDir>("zrt-stripe"));
    paths.push_back(dirs.back()->path() / "striped");
  }
  for (EngineKind kind : {EngineKind::IoUring, EngineKind::ThreadPool}) {
    CAPTURE(nameOf(kind));
    AioOptions o;
    o.engine = kind;
    o.block_size = kUnit;
    o.queue_depth = 4;
    o.intra_op_parallelism = 3;
    OffloadEngine engine(o);
    auto opts = engine.fileOptions();
    opts.create = true;
    opts.truncate = true;
    auto file = engine.open(paths, opts);
    REQUIRE(file->stripes() == kStripes);
    CHECK(file->stripeUnit() == kUnit);
    const std::uint64_t offset = 5 * kUnit + 8192;  // not on a stripe boundary
    const std::size_t len = 17 * kUnit + 12345;     // ends in a tail
    AlignedBuffer a(len);
    fillPattern(a.data(), len, 31);
    engine.writeSync(file, offset, a.data(), len);

    // Independent check: every logical byte is in the stripe file the formula names.
    std::vector<AlignedBuffer> raw;
    for (std::size_t s = 0; s < kStripes; ++s) {
      raw.emplace_back(40 * kUnit);
      const int fd = ::open(paths[s].c_str(), O_RDONLY);
      REQUIRE(fd >= 0);
      CHECK(::pread(fd, raw[s].data(), raw[s].size(), 0) > 0);
      ::close(fd);
    }
    std::size_t wrong = 0;
    for (std::uint64_t i = 0; i < len; ++i) {
      const std::uint64_t logical = offset + i;
      const std::size_t s = (logical / kUnit) % kStripes;
      const std::uint64_t at = (logical / kUnit / kStripes) * kUnit + logical % kUnit;
      wrong += raw[s].data()[at] != a.data()[i];
    }
    CHECK(wrong == 0);

    AlignedBuffer back(len);
    engine.readSync(file, offset, back.data(), len);
    CHECK(firstMismatch(back.data(), len, 31) == -1);
  }
}

TEST_CASE("a stripe unit that is not a multiple of 4096 is refused") {
  TempDir a, b;
  FileOpenOptions opts;
  opts.create = true;
  opts.stripeUnit = 1000;
  CHECK_THROWS_AS(OffloadFile::open({a.path() / "x", b.path() / "x"}, opts), zrt::InvalidArgument);
}
