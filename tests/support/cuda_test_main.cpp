// main() of GPU test programs: exits 77, which ctest reports as skipped, when this build has no
// CUDA or no CUDA device answers; otherwise runs doctest as usual.

#include <doctest/doctest.h>

#include <cstdio>

#include "core/build_config.h"
#include "core/device.h"

int main(int argc, char** argv) {
  if (!zrt::cudaDeviceAvailable()) {
    std::printf("skipped: %s\n", ZRT_HAVE_CUDA ? "no CUDA device answers on this machine"
                                               : "this build has no CUDA (ZRT_CUDA=OFF)");
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
