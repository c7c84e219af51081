// The reference trainer's matrix products on a GPU: row-major products (the host kernels'
// convention, gpt2_kernels.h) through cuBLAS on one stream. cuBLAS is column-major, so each
// product is computed transposed: C^T = op(B)^T op(A)^T, which is C in row-major order.
// One owner of the cuBLAS handle. Thread-safety: one thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "tools/trainer/model/cuda/cublas_functions.h"

// Every cuBLAS call goes through it (and through cublasFunctions(), cublas_functions.h): a failure
// throws ExternalError with file:line, the call's text and cuBLAS's own name for the status.
#define ZRT_CHECK_CUBLAS(call)                                                                   \
  do {                                                                                           \
    cublasStatus_t zrt_cublas_status_ = (call);                                                  \
    if (zrt_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                           \
      ZRT_THROW(::zrt::ExternalError, "cuBLAS call `" #call "` failed: ",                        \
                ::zrt::trainer::cuda::cublasFunctions().getStatusName(zrt_cublas_status_), ": ", \
                ::zrt::trainer::cuda::cublasFunctions().getStatusString(zrt_cublas_status_));    \
    }                                                                                            \
  } while (0)

namespace zrt::trainer::cuda {

class CublasGemm {
 public:
  // A handle whose work goes to `stream`, computing in plain fp32 (no TF32: the host computes in
  // fp32, and a GPU run is compared with it).
  explicit CublasGemm(cudaStream_t stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // C[M,N] = alpha op(A) op(B) + beta C, row-major; op transposes when the flag says so.
  void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc);
  // `count` such products, the i-th on A + i strideA, B + i strideB and C + i strideC (floats).
  void gemmBatched(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   long long strideA, const float* B, int ldb, long long strideB, float beta, float* C,
                   int ldc, long long strideC, int count);
  // out[j] = the sum over the n rows of x[i, j] (x [n, cols] row-major; `ones` holds n ones).
  void columnSums(float* out, const float* x, const float* ones, int n, int cols);

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace zrt::trainer::cuda
