// Which of OpenBLAS's kernel sets the matrix products run on. Debian 12's OpenBLAS 0.3.21 picks
// one by CPU model when it loads and falls back to its SSE3 kernels ("Prescott") on a model it
// does not know, such as a recent Xeon (measured on an Emerald Rapids VM: 55-65 GFLOP/s on a
// 2048^3 SGEMM against 240-310 with its AVX-512 "SkylakeX" kernels). It reads OPENBLAS_CORETYPE
// only as it loads, before main, so the choice cannot be changed in the process that made it.
#pragma once

#include <string>

namespace zrt::trainer {

// The kernel set OpenBLAS chose in this process ("SkylakeX", "Haswell", "Prescott"...).
std::string blasCoreName();

struct CpuVectors {
  bool avx512 = false, avx2 = false;
};
CpuVectors cpuVectorsHere();

// The kernel set to ask for instead of `chosen`, or nullptr: only when `chosen` is one of the
// pre-AVX sets OpenBLAS falls back to and the CPU has AVX-512 (SkylakeX) or AVX2 (Haswell).
const char* betterBlasCore(const std::string& chosen, CpuVectors cpu);

}  // namespace zrt::trainer
