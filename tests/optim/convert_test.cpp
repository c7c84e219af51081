// The kernels' SIMD conversions equal core/dtype.h's exact scalar ones bit for bit: every
// fp16 and bf16 bit pattern to float, and float to fp16/bf16 for every float whose low bits sit
// at or next to a rounding boundary, plus a stride through all 2^32 patterns (NaNs, infinities,
// subnormals included).
#include "runtime/optim/convert.h"

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "runtime/optim/isa.h"
#include "tests/optim/compared_paths.h"
#include "tests/optim/optim_test_util.h"

using namespace zrt;
using namespace zrt::optim;
using namespace zrt::optim::test;

TEST_CASE("fp16 and bf16 to float: all 65536 patterns, every path") {
  std::vector<std::uint16_t> all(65536 + 7);  // +7: a tail on every path
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<float> want(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      want[i] = t == DType::F16 ? halfToFloat(all[i]) : bf16ToFloat(all[i]);
    }
    for (Isa isa : pathsToCompare()) {
      std::vector<float> got(all.size(), 1.0f);
      convertToFloat(t, all.data(), got.data(), all.size(), isa);
      INFO(nameOf(t) << " on " << nameOf(isa));
      CHECK(firstDifference(want.data(), got.data(), all.size(), 4) == "");
    }
  }
}

namespace {

// Floats whose low 16 bits are at or next to every rounding boundary of fp16 (13 bits dropped
// for normals, more for subnormal results) and bf16 (16 bits dropped), for every upper pattern
// of sign, exponent and leading mantissa bits, plus a stride through all 2^32 patterns.
std::vector<float> boundaryFloats() {
  std::vector<std::uint32_t> lows;
  for (int bit = 0; bit <= 16; ++bit) {
    const std::uint32_t half = bit == 0 ? 0 : 1u << (bit - 1);
    for (std::uint32_t d : {0u, 1u}) {
      lows.push_back((half + d) & 0xffffu);
      lows.push_back((half - d) & 0xffffu);
    }
  }
  lows.push_back(0xffffu);
  std::vector<float> out;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (std::uint32_t lo : lows) out.push_back(std::bit_cast<float>((hi << 16) | lo));
  }
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) {
    out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  }
  return out;
}

}  // namespace

TEST_CASE("float to fp16 and bf16 at every rounding boundary, every path") {
  const std::vector<float> in = boundaryFloats();
  MESSAGE(in.size() << " floats");
  for (DType t : {DType::F16, DType::BF16, DType::F32}) {
    const std::size_t elem = dtypeSize(t);
    std::vector<unsigned char> wantBytes(in.size() * elem);
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (t == DType::F32) {
        std::memcpy(&wantBytes[i * 4], &in[i], 4);
      } else {
        const std::uint16_t h = t == DType::F16 ? floatToHalf(in[i]) : floatToBf16(in[i]);
        std::memcpy(&wantBytes[i * 2], &h, 2);
      }
    }
    for (Isa isa : pathsToCompare()) {
      std::vector<unsigned char> got(in.size() * elem, 0xaa);
      convertFromFloat(t, in.data(), got.data(), in.size(), isa);
      INFO(nameOf(t) << " on " << nameOf(isa));
      CHECK(firstDifference(wantBytes.data(), got.data(), in.size(), elem) == "");
    }
  }
}

TEST_CASE("conversions of short arrays write nothing past the end") {
  std::vector<float> in(40);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 0.1f * static_cast<float>(i);
  for (Isa isa : pathsToCompare()) {
    for (std::size_t n : {0, 1, 7, 9, 17, 33}) {
      std::vector<std::uint16_t> out(40, 0xbeef);
      convertFromFloat(DType::BF16, in.data(), out.data(), n, isa);
      for (std::size_t i = 0; i < 40; ++i) {
        INFO(nameOf(isa) << " n " << n << " i " << i);
        CHECK(out[i] == (i < n ? floatToBf16(in[i]) : 0xbeef));
      }
    }
  }
}
