// The division and the add use CUDA's explicitly rounded intrinsics (__fdiv_rn, __fadd_rn) so
// nvcc cannot substitute an approximate divide or contract them: one IEEE operation each, in the
// CPU kernels' order, and the same rounding to fp16/bf16 (core/cuda/dtype_device.cuh), so the
// results are the CPU paths' bits.
#include "comm/cuda/average_kernels.h"

#include <algorithm>
#include <cstdint>

#include "core/cuda/dtype_device.cuh"

namespace zrt::comm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;  // a grid-stride loop covers the rest

template <DType T, bool Add>
__global__ void addDivKernel(void* dst, const void* src, std::int64_t n, float d) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float q = __fdiv_rn(cuda_dtype::load<T>(src, i), d);
    if constexpr (Add) q = __fadd_rn(cuda_dtype::load<T>(dst, i), q);
    cuda_dtype::store<T>(dst, i, q);
  }
}

template <bool Add>
cudaError_t launch(DType dtype, void* dst, const void* src, std::size_t count, float d, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  const auto n = static_cast<std::int64_t>(count);
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  switch (dtype) {
    case DType::F32: addDivKernel<DType::F32, Add><<<blocks, kThreads, 0, s>>>(dst, src, n, d); break;
    case DType::F16: addDivKernel<DType::F16, Add><<<blocks, kThreads, 0, s>>>(dst, src, n, d); break;
    case DType::BF16: addDivKernel<DType::BF16, Add><<<blocks, kThreads, 0, s>>>(dst, src, n, d); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchDivide(DType dtype, void* buf, std::size_t count, float divisor, cudaStream_t stream) {
  if (divisor == 1.0f) return cudaSuccess;  // as divideBy: x / 1 is x
  return launch<false>(dtype, buf, buf, count, divisor, stream);
}

cudaError_t launchAddDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor,
                             cudaStream_t stream) {
  return launch<true>(dtype, dst, src, count, divisor, stream);
}

}  // namespace zrt::comm::cuda
