// CublasFunctions: the cuBLAS functions the trainer's GPU model calls, looked up in
// libcublas.so.<major> at the first cublasFunctions() instead of linked, so that no program needs
// cuBLAS (with cuBLASLt, half a gigabyte) to start: a run on the host never loads it, and a run on
// a GPU finds it on the loader's path or, in a process that imported torch first, gets torch's.
// cublas_v2.h stays a build dependency: the types and constants come from it, and each pointer's
// type is its function's declaration there. (Not named cublas_api.h: that is cuBLAS's own header.)
// Thread-safety: cublasFunctions() may be called from any thread; the first call loads, the
// others wait for it and then share the table, which never changes.
#pragma once

#include <cublas_v2.h>

namespace zrt::trainer::cuda {

struct CublasFunctions {
  // cublas_v2.h renames several of these with macros (cublasCreate is cublasCreate_v2): each
  // type, like the symbol looked up (cublas_functions.cpp), is the one the header's name means.
  decltype(&::cublasCreate) create;
  decltype(&::cublasDestroy) destroy;
  decltype(&::cublasSetStream) setStream;
  decltype(&::cublasSetMathMode) setMathMode;
  decltype(&::cublasGetStatusName) getStatusName;
  decltype(&::cublasGetStatusString) getStatusString;
  decltype(&::cublasSgemm) sgemm;
  decltype(&::cublasSgemmStridedBatched) sgemmStridedBatched;
  decltype(&::cublasSgemv) sgemv;
};

// The table, loaded at the first call. Throws ExternalError naming the library (or the missing
// symbol) and how to provide it when it cannot be loaded; a later call tries again.
const CublasFunctions& cublasFunctions();

}  // namespace zrt::trainer::cuda
