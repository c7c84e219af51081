#include "tools/trainer/model/cuda/cublas_gemm.h"

#include "core/log.h"

namespace zrt::trainer::cuda {

namespace {

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

CublasGemm::CublasGemm(cudaStream_t stream) {
  ZRT_CHECK_CUBLAS(cublasFunctions().create(&handle_));
  try {
    ZRT_CHECK_CUBLAS(cublasFunctions().setStream(handle_, stream));
    ZRT_CHECK_CUBLAS(cublasFunctions().setMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasFunctions().destroy(handle_);
    throw;
  }
}

CublasGemm::~CublasGemm() {
  if (const cublasStatus_t st = cublasFunctions().destroy(handle_); st != CUBLAS_STATUS_SUCCESS)
    logError(std::string("gpt2: cublasDestroy failed: ") + cublasFunctions().getStatusString(st));
}

void CublasGemm::gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  // Row-major C [M,N] is column-major C^T [N,M]: C^T = op(B)^T op(A)^T, whose operands are the
  // row-major buffers read column-major, each with its own flag.
  ZRT_CHECK_CUBLAS(cublasFunctions().sgemm(handle_, op(transB), op(transA), N, M, K, &alpha, B, ldb,
                                           A, lda, &beta, C, ldc));
}

void CublasGemm::gemmBatched(bool transA, bool transB, int M, int N, int K, float alpha, const float* A,
                             int lda, long long strideA, const float* B, int ldb, long long strideB, float beta,
                             float* C, int ldc, long long strideC, int count) {
  if (M <= 0 || N <= 0 || count <= 0) return;
  ZRT_CHECK_CUBLAS(cublasFunctions().sgemmStridedBatched(handle_, op(transB), op(transA), N, M, K,
                                                         &alpha, B, ldb, strideB, A, lda, strideA,
                                                         &beta, C, ldc, strideC, count));
}

void CublasGemm::columnSums(float* out, const float* x, const float* ones, int n, int cols) {
  if (cols <= 0) return;
  // x [n, cols] row-major is column-major [cols, n]: out = that times the n ones.
  const float one = 1.0f, zero = 0.0f;
  ZRT_CHECK_CUBLAS(cublasFunctions().sgemv(handle_, CUBLAS_OP_N, cols, n, &one, x, cols, ones, 1,
                                           &zero, out, 1));
}

}  // namespace zrt::trainer::cuda
