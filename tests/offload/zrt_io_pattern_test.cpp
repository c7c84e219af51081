// zrt-io's verify pattern: what it writes checks clean, and a flipped byte, a torn tail or a
// block written at the wrong offset (right bytes, wrong place) is caught at the right index.
#include <doctest/doctest.h>

#include <vector>

#include "data_pattern.h"

using namespace zrt::iotool;

TEST_CASE("the verify pattern catches flipped bytes and misplaced blocks") {
  std::vector<std::byte> a(1 << 16), b(1 << 16);
  fillPattern(a.data(), a.size(), 3, 1 << 20);
  CHECK(checkPattern(a.data(), a.size(), 3, 1 << 20) == -1);
  a[12345] ^= std::byte{1};
  CHECK(checkPattern(a.data(), a.size(), 3, 1 << 20) == 12345);
  // The same bytes belong nowhere else: another offset or another file does not match.
  fillPattern(b.data(), b.size(), 3, 1 << 20);
  CHECK(checkPattern(b.data(), b.size(), 3, (1 << 20) + 4096) == 0);
  CHECK(checkPattern(b.data(), b.size(), 4, 1 << 20) == 0);
  // Lengths that end mid-word, and a piece generated on its own, agree with the whole.
  std::vector<std::byte> part(1001);
  fillPattern(part.data(), part.size(), 3, (1 << 20) + 8 * 100);
  CHECK(std::equal(part.begin(), part.end(), b.begin() + 800));
  CHECK(checkPattern(part.data(), part.size(), 3, (1 << 20) + 800) == -1);
  part[1000] ^= std::byte{0x80};
  CHECK(checkPattern(part.data(), part.size(), 3, (1 << 20) + 800) == 1000);
}
