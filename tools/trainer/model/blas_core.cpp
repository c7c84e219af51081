#include "tools/trainer/model/blas_core.h"

#include <cblas.h>

namespace zrt::trainer {

std::string blasCoreName() { return openblas_get_corename(); }

CpuVectors cpuVectorsHere() {
  return {__builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx2") != 0};
}

const char* betterBlasCore(const std::string& chosen, CpuVectors cpu) {
  // The sets OpenBLAS's x86-64 DYNAMIC_ARCH build has below Sandy Bridge: a fallback on a CPU
  // with wider vectors, never a choice it would make for one.
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom"})
    if (chosen == old) return cpu.avx512 ? "SkylakeX" : cpu.avx2 ? "Haswell" : nullptr;
  return nullptr;
}

}  // namespace zrt::trainer
