// cuBLAS opened at the first call, without a GPU: libcublas.so.<major> either loads with every
// function the model names, the _v2 ones cublas_v2.h substitutes included (and answers a call
// that needs no device), or the error names it and says how to provide it. A symbol the library
// lacks fails either way.
#include "tools/trainer/model/cuda/cublas_functions.h"

#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

using namespace zrt;

TEST_CASE("cublasFunctions() loads cuBLAS once, or says how to provide it") {
  try {
    const trainer::cuda::CublasFunctions& f = trainer::cuda::cublasFunctions();
    CHECK(std::string(f.getStatusName(CUBLAS_STATUS_NOT_INITIALIZED)) ==
          "CUBLAS_STATUS_NOT_INITIALIZED");
    CHECK(&trainer::cuda::cublasFunctions() == &f);
  } catch (const ExternalError& e) {
    const std::string w = e.what();
    MESSAGE("libcublas not loaded: ", w);
    CHECK(w.find("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR) + " not found") !=
          std::string::npos);
    CHECK(w.find("LD_LIBRARY_PATH") != std::string::npos);
  }
}
