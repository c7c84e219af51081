// The scalar conversions against the compiler's own _Float16 / F16C-free reference: every half
// bit pattern round-trips, and float->half/bf16 matches round-to-nearest-even computed in double.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

using namespace zrt;

namespace {
// Reference: the nearest representable value computed by brute force over neighbours in double.
double halfValue(std::uint16_t h) { return static_cast<double>(halfToFloat(h)); }
}  // namespace

TEST_CASE("every finite half round-trips through float exactly") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float f = halfToFloat(b);
    if (std::isnan(f)) {
      CHECK(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    CHECK(floatToHalf(f) == b);
  }
  CHECK(halfToFloat(0x3c00) == 1.0f);
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(halfToFloat(0x7bff) == 65504.0f);
}

TEST_CASE("float to half rounds to nearest even against a double reference") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mag(-30.0, 17.0);
  for (int i = 0; i < 200000; ++i) {
    const float f = static_cast<float>(std::ldexp(1.0, 0) * std::exp2(mag(rng)) * (i % 2 ? -1 : 1));
    const std::uint16_t h = floatToHalf(f);
    const double got = halfValue(h);
    if (std::fabs(f) >= 65520.0f) {
      CHECK(std::isinf(got));
      continue;
    }
    // Neighbours of the result must not be strictly closer; ties go to an even mantissa.
    const double err = std::fabs(got - f);
    for (int d : {-1, 1}) {
      const std::uint16_t n = static_cast<std::uint16_t>(h + d);
      if ((n & 0x7c00) == 0x7c00 || ((n ^ h) & 0x8000)) continue;
      const double nerr = std::fabs(halfValue(n) - f);
      CHECK(err <= nerr);
      if (err == nerr) CHECK((h & 1) == 0);
    }
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps specials") {
  CHECK(floatToBf16(1.0f) == 0x3f80);
  CHECK(bf16ToFloat(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1+2^-7: ties to even (1.0).
  CHECK(floatToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(std::isinf(bf16ToFloat(floatToBf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16ToFloat(floatToBf16(3.4028235e38f))));  // rounds up past max bf16
}

TEST_CASE("dtype names") {
  CHECK(parseDType("bf16") == DType::BF16);
  CHECK(parseDType("half") == DType::F16);
  CHECK(dtypeSize(DType::F32) == 4);
  CHECK(std::string(nameOf(DType::F16)) == "fp16");
  CHECK_THROWS_AS(parseDType("int8"), InvalidArgument);
}
