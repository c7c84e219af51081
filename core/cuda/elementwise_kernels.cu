// core/elementwise.h's kernel body as a __global__ kernel: a grid-stride loop over the launch's
// elements, loading and storing through core/cuda/dtype_device.cuh (the CPU's rounding).
// The sum of squares runs one thread per 64 Ki-element chunk, in the host's order, so the norm
// has the host's bits; a tree reduction would be faster on a GPU and give other bits.
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
  // Explicitly rounded: nvcc may neither contract these into an fma nor use an approximate
  // divide or square root, so the kernel stores the host body's bits.
  __device__ static bool isfinite(double x) { return ::isfinite(x); }
  __device__ static float fmul(float a, float b) { return __fmul_rn(a, b); }
  __device__ static float fadd(float a, float b) { return __fadd_rn(a, b); }
  __device__ static float fdiv(float a, float b) { return __fdiv_rn(a, b); }
  __device__ static float fsqrt(float a) { return __fsqrt_rn(a); }
  __device__ static float ffma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
  __device__ static double dmul(double a, double b) { return __dmul_rn(a, b); }
  __device__ static double dadd(double a, double b) { return __dadd_rn(a, b); }
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
