// Which OpenBLAS kernel set zrt-train asks for: only ever instead of a pre-AVX fallback, and only
// on a CPU with the vectors the better set needs.
#include <doctest/doctest.h>

#include <string>

#include "tools/trainer/model/blas_core.h"

using zrt::trainer::betterBlasCore;
using zrt::trainer::CpuVectors;

namespace {
std::string better(const std::string& chosen, CpuVectors cpu) {
  const char* b = betterBlasCore(chosen, cpu);
  return b ? b : "(none)";
}
}  // namespace

TEST_CASE("a fallback to SSE3 kernels is replaced by the CPU's widest set") {
  CHECK(better("Prescott", {true, true}) == "SkylakeX");
  CHECK(better("Prescott", {false, true}) == "Haswell");
  CHECK(better("Nehalem", {true, true}) == "SkylakeX");
  CHECK(better("Core2", {false, true}) == "Haswell");
  // A CPU without AVX2 has nothing better to run.
  CHECK(better("Prescott", {false, false}) == "(none)");
}

TEST_CASE("a set OpenBLAS chose for the CPU's vectors stays") {
  for (const char* chosen : {"SkylakeX", "Cooperlake", "SapphireRapids", "Haswell", "Zen", "SandyBridge"}) {
    CAPTURE(chosen);
    CHECK(better(chosen, {true, true}) == "(none)");
    CHECK(better(chosen, {false, true}) == "(none)");
  }
}

TEST_CASE("this process's OpenBLAS names its kernel set") {
  CHECK_FALSE(zrt::trainer::blasCoreName().empty());
}
