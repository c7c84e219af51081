// core/elementwise.h's kernel body as a __global__ kernel: a grid-stride loop over the launch's
// elements, loading and storing through core/cuda/dtype_device.cuh (the CPU's rounding).
#include "core/cuda/elementwise_kernels.h"

#include <algorithm>
#include <cstdint>

#include "core/cuda/dtype_device.cuh"

namespace zrt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;  // a grid-stride loop covers the rest

struct CudaAccess {
  __device__ static float load(DType t, const void* base, std::int64_t i) {
    switch (t) {
      case DType::F16: return cuda_dtype::load<DType::F16>(base, i);
      case DType::BF16: return cuda_dtype::load<DType::BF16>(base, i);
      default: return cuda_dtype::load<DType::F32>(base, i);
    }
  }
  __device__ static void store(DType t, void* base, std::int64_t i, float v) {
    switch (t) {
      case DType::F16: cuda_dtype::store<DType::F16>(base, i, v); break;
      case DType::BF16: cuda_dtype::store<DType::BF16>(base, i, v); break;
      default: cuda_dtype::store<DType::F32>(base, i, v); break;
    }
  }
};

__global__ void elementwiseKernel(ElementwiseArgs a) {
  const auto n = static_cast<std::int64_t>(a.count);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    elementwiseAt<CudaAccess>(a, i);
}

}  // namespace

cudaError_t launchElementwise(const ElementwiseArgs& args, cudaStream_t stream) {
  if (args.count == 0) return cudaSuccess;
  const auto n = static_cast<std::int64_t>(args.count);
  const auto blocks =
      static_cast<unsigned>(std::min<std::int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  elementwiseKernel<<<blocks, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace zrt::cuda
