// Which instruction-set path the CPU optimizer kernels run: the widest the processor supports
// (chosen at run time with __builtin_cpu_supports), or one a caller forces (tests compare every
// path bit for bit; the benchmark times each). ZRT_OPTIM_ISA=scalar|avx2|avx512 caps the
// automatic choice for a whole process; it is read once and logged.
// Thread-safe: detection runs once behind a function-local static.
#pragma once

#include <string_view>
#include <vector>

namespace zrt::optim {

enum class Isa {
  Auto = 0,    // the widest supported path (or ZRT_OPTIM_ISA's)
  Scalar = 1,  // portable C++, any x86-64 (or any other processor)
  Avx2 = 2,    // AVX2 + FMA + F16C
  Avx512 = 3,  // AVX-512 F + BW + VL
};

std::string_view nameOf(Isa isa);
// "auto", "scalar", "avx2", "avx512"; throws InvalidArgument naming `what` otherwise.
Isa parseIsa(std::string_view name, std::string_view what = "isa");

// Whether this processor (and its OS) can run `isa`'s path. Auto and Scalar always can.
bool isaSupported(Isa isa);
// Every concrete path this processor runs, narrowest first (Scalar is always first).
std::vector<Isa> supportedIsas();
// Auto -> the widest supported path, capped by ZRT_OPTIM_ISA when set; a concrete path is
// returned as is if supported, else InvalidArgument says which path the processor lacks.
Isa resolveIsa(Isa requested);

// How a step runs: which path, and how many threads (0: OpenMP's default for this process).
// Small ranges run on fewer threads than asked, since starting threads would cost more than the
// work; the result is the same bit for bit whatever the thread count.
struct StepOptions {
  Isa isa = Isa::Auto;
  int threads = 0;
};

}  // namespace zrt::optim
