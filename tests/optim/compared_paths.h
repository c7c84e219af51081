// The CPU paths the optimizer tests run, checked against what the processor offers. The tests
// compare every path with the scalar one (bit for bit) or with a reference; on a processor with
// only the scalar path that comparison is empty, and the program says so rather than passing
// as though SIMD had been checked. A processor that has AVX2 or AVX-512 (read from
// /proc/cpuinfo, independently of isa.cpp's detection) while the kernels do not offer that path
// is a failure: the path the machine would use in production went untested.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/optim/isa.h"

namespace zrt::optim::test {

// The flags of the first processor in /proc/cpuinfo; empty where it cannot be read.
inline std::set<std::string> cpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// supportedIsas(), checked against the processor's flags, once per program (the first test case
// that asks fails when a path is missing) and with a message when only the scalar path exists.
inline std::vector<Isa> pathsToCompare() {
  const std::vector<Isa> paths = supportedIsas();
  static bool checked = false;
  if (checked) return paths;
  checked = true;
  const auto offered = [&](Isa isa) {
    return std::find(paths.begin(), paths.end(), isa) != paths.end();
  };
  const std::set<std::string> flags = cpuinfoFlags();
  const auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(),
                       [&](const char* f) { return flags.count(f) > 0; });
  };
  const bool avx2 = has({"avx2", "fma", "f16c"});
  const bool avx512 = avx2 && has({"avx512f", "avx512bw", "avx512vl"});
  if (avx2 && !offered(Isa::Avx2)) {
    FAIL_CHECK("this processor has AVX2, FMA and F16C (/proc/cpuinfo) but the optimizer kernels "
               "do not offer the avx2 path, so it goes untested (runtime/optim/isa.cpp)");
  }
  if (avx512 && !offered(Isa::Avx512)) {
    FAIL_CHECK("this processor has AVX-512 F, BW and VL (/proc/cpuinfo) but the optimizer "
               "kernels do not offer the avx512 path, so it goes untested "
               "(runtime/optim/isa.cpp)");
  }
  if (paths.size() == 1) {
    const std::string why = flags.empty() ? " (/proc/cpuinfo unreadable)" : "";
    MESSAGE("only the scalar path exists on this processor"
            << why << ": no SIMD path was compared with it; this run checks the scalar path alone");
  }
  return paths;
}

}  // namespace zrt::optim::test
