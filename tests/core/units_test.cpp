#include <doctest/doctest.h>

#include "core/error.h"
#include "core/units.h"

using namespace zrt;

TEST_CASE("parseBytes accepts plain, suffixed and scientific sizes") {
  CHECK(parseBytes("4096") == 4096);
  CHECK(parseBytes("4K") == 4096);
  CHECK(parseBytes("4k") == 4096);
  CHECK(parseBytes("64M") == 64ull << 20);
  CHECK(parseBytes("64MiB") == 64ull << 20);
  CHECK(parseBytes("1.5G") == 3ull << 29);
  CHECK(parseBytes("2e8") == 200000000ull);
  CHECK(parseBytes("10B") == 10);
  CHECK(parseBytes("0") == 0);
}

TEST_CASE("parseBytes rejects what is not a size, naming it") {
  for (const char* bad : {"", "abc", "-1", "1.5", "4X", "1e30", "nan"}) {
    CHECK_THROWS_AS(parseBytes(bad, "--size"), InvalidArgument);
  }
  try {
    parseBytes("12Q", "--block-size");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("--block-size '12Q'") != std::string::npos);
  }
}

TEST_CASE("formatBytes") {
  CHECK(formatBytes(512) == "512 B");
  CHECK(formatBytes(1536) == "1.50 KiB");
  CHECK(formatBytes(3ull << 30) == "3.00 GiB");
}
