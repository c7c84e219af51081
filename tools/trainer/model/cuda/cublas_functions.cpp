#include "tools/trainer/model/cuda/cublas_functions.h"

#include <memory>

#include "core/shared_library.h"

namespace zrt::trainer::cuda {
namespace {

// The soname of the cuBLAS whose header this was built with: its ABI changes with the major.
constexpr const char* kCublasSoname = "libcublas.so." ZRT_EXPANDED_STRING(CUBLAS_VER_MAJOR);

struct LoadedCublas {
  SharedLibrary library;
  CublasFunctions functions;
};

std::unique_ptr<LoadedCublas> loadCublas() {
  auto cublas = std::make_unique<LoadedCublas>();
  cublas->library = SharedLibrary::open(
      kCublasSoname,
      "it needs libcublasLt beside it; with torch's CUDA wheels both are in "
      "site-packages/nvidia/cu" ZRT_EXPANDED_STRING(CUBLAS_VER_MAJOR) "/lib (pip package "
      "nvidia-cublas), or site-packages/nvidia/cublas/lib before CUDA 13");
  const SharedLibrary& lib = cublas->library;
  CublasFunctions& f = cublas->functions;
// ZRT_LIBRARY_FUNCTION expands the name first: cublasSgemm loads cublasSgemm_v2.
#define ZRT_CUBLAS_LOAD(field, function) f.field = ZRT_LIBRARY_FUNCTION(lib, function)
  ZRT_CUBLAS_LOAD(create, cublasCreate);
  ZRT_CUBLAS_LOAD(destroy, cublasDestroy);
  ZRT_CUBLAS_LOAD(setStream, cublasSetStream);
  ZRT_CUBLAS_LOAD(setMathMode, cublasSetMathMode);
  ZRT_CUBLAS_LOAD(getStatusName, cublasGetStatusName);
  ZRT_CUBLAS_LOAD(getStatusString, cublasGetStatusString);
  ZRT_CUBLAS_LOAD(sgemm, cublasSgemm);
  ZRT_CUBLAS_LOAD(sgemmStridedBatched, cublasSgemmStridedBatched);
  ZRT_CUBLAS_LOAD(sgemv, cublasSgemv);
#undef ZRT_CUBLAS_LOAD
  return cublas;
}

}  // namespace

const CublasFunctions& cublasFunctions() {
  // Never freed, so cuBLAS is never unloaded: a handle owned by a static may be destroyed after
  // this one would be.
  static const LoadedCublas* const cublas = loadCublas().release();
  return cublas->functions;
}

}  // namespace zrt::trainer::cuda
