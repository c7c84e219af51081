#include "runtime/optim/isa.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/error.h"
#include "core/log.h"

namespace zrt::optim {

std::string_view nameOf(Isa isa) {
  switch (isa) {
    case Isa::Auto:
      return "auto";
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

Isa parseIsa(std::string_view name, std::string_view what) {
  if (name == "auto") return Isa::Auto;
  if (name == "scalar") return Isa::Scalar;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  ZRT_THROW(InvalidArgument, what, ": unknown optimizer path '", name,
            "': expected auto, scalar, avx2 or avx512");
}

namespace {

struct CpuPaths {
  bool avx2 = false;
  bool avx512 = false;
};

CpuPaths detect() {
  CpuPaths p;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // libgcc's checks include the OS's XSAVE support for ymm/zmm state, not only CPUID bits.
  // F16C is read from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
  // the name, and the AVX2 check above it already covers the OS's ymm support F16C needs.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  p.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  p.avx512 = p.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return p;
}

const CpuPaths& cpuPaths() {
  static const CpuPaths paths = detect();
  return paths;
}

Isa widestAllowed() {
  static const Isa isa = [] {
    Isa best = cpuPaths().avx512 ? Isa::Avx512 : cpuPaths().avx2 ? Isa::Avx2 : Isa::Scalar;
    const char* env = std::getenv("ZRT_OPTIM_ISA");
    if (env == nullptr || *env == '\0') return best;
    Isa cap = parseIsa(env, "ZRT_OPTIM_ISA");
    if (cap == Isa::Auto) return best;
    if (!isaSupported(cap)) {
      ZRT_WARN("ZRT_OPTIM_ISA=", env, " is not supported by this processor; using ", nameOf(best));
      return best;
    }
    Isa chosen = static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
    ZRT_INFO("optimizer path capped by ZRT_OPTIM_ISA=", env, ": using ", nameOf(chosen));
    return chosen;
  }();
  return isa;
}

}  // namespace

bool isaSupported(Isa isa) {
  switch (isa) {
    case Isa::Auto:
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return cpuPaths().avx2;
    case Isa::Avx512:
      return cpuPaths().avx512;
  }
  return false;
}

std::vector<Isa> supportedIsas() {
  std::vector<Isa> out{Isa::Scalar};
  if (isaSupported(Isa::Avx2)) out.push_back(Isa::Avx2);
  if (isaSupported(Isa::Avx512)) out.push_back(Isa::Avx512);
  return out;
}

Isa resolveIsa(Isa requested) {
  if (requested == Isa::Auto) return widestAllowed();
  if (!isaSupported(requested)) {
    ZRT_THROW(InvalidArgument, "optimizer path ", nameOf(requested),
              " was requested but this processor lacks it (",
              requested == Isa::Avx2 ? "needs AVX2, FMA and F16C" : "needs AVX-512 F, BW and VL",
              ")");
  }
  return requested;
}

}  // namespace zrt::optim
