// The fused multi-tensor Adam/AdamW kernel. Per element it performs exactly the float
// operations listed in kernel_args.h, in that order, written with CUDA's explicitly rounded
// intrinsics (__fmul_rn, __fadd_rn, __fmaf_rn, __fdiv_rn, __fsqrt_rn) so that nvcc can neither
// contract a multiply and an add into an fma nor use an approximate divide or square root:
// the result is the CPU paths' result, bit for bit. Conversions to fp16/bf16 mirror
// core/dtype.h's integer algorithms (core/cuda/dtype_device.cuh).
//
// Multi-tensor: the host (launch_plan.h) packs up to kMaxTensors slices and kMaxBlocks
// (slice, chunk) pairs into one kernel parameter block (under the 4 KiB classic limit); each thread
// block updates one chunk of one slice, kIlp elements per thread at a time so several loads are in
// flight.
#include <cuda_fp16.h>

#include <cstdint>
#include <vector>

#include "core/cuda/dtype_device.cuh"
#include "runtime/optim/cuda/adam_launch.h"
#include "runtime/optim/cuda/launch_plan.h"

namespace zrt::optim::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kIlp = 4;
static_assert(kChunk % (kThreads * kIlp) == 0);

struct LaunchMeta {
  float* param[kMaxTensors];
  float* expAvg[kMaxTensors];
  float* expAvgSq[kMaxTensors];
  const void* grad[kMaxTensors];
  void* copy[kMaxTensors];
  std::int64_t count[kMaxTensors];
  std::int32_t blockChunk[kMaxBlocks];
  std::uint8_t blockTensor[kMaxBlocks];
};
static_assert(sizeof(LaunchMeta) + sizeof(AdamCoeffs) <= 4096, "kernel parameters over 4 KiB");

template <DType G>
__device__ __forceinline__ float loadGrad(const void* base, std::int64_t i) {
  return cuda_dtype::load<G>(base, i);
}

template <CopyKind C>
__device__ __forceinline__ void storeCopy(void* base, std::int64_t i, float p) {
  if constexpr (C == CopyKind::F32) {
    static_cast<float*>(base)[i] = p;
  } else if constexpr (C == CopyKind::F16) {
    cuda_dtype::store<DType::F16>(base, i, p);
  } else if constexpr (C == CopyKind::BF16) {
    cuda_dtype::store<DType::BF16>(base, i, p);
  }
}

template <DType G, CopyKind C, AdamMode M>
__global__ void __launch_bounds__(kThreads) adamKernel(const AdamCoeffs c, const LaunchMeta meta) {
  const int t = meta.blockTensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.blockChunk[blockIdx.x]) * kChunk;
  const std::int64_t n = meta.count[t];
  const std::int64_t end = begin + kChunk < n ? begin + kChunk : n;
  float* __restrict__ param = meta.param[t];
  float* __restrict__ expAvg = meta.expAvg[t];
  float* __restrict__ expAvgSq = meta.expAvgSq[t];
  const void* grad = meta.grad[t];
  void* copy = meta.copy[t];
  for (std::int64_t base = begin + threadIdx.x; base < end; base += kThreads * kIlp) {
    float g[kIlp], p[kIlp], m[kIlp], v[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::int64_t i = base + k * kThreads;
      if (i < end) {
        g[k] = loadGrad<G>(grad, i);
        p[k] = param[i];
        m[k] = expAvg[i];
        v[k] = expAvgSq[i];
      }
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::int64_t i = base + k * kThreads;
      if (i >= end) continue;
      float gk = __fmul_rn(g[k], c.gradScale);
      float pk = p[k];
      if constexpr (M == AdamMode::L2) gk = __fmaf_rn(pk, c.weightDecay, gk);
      if constexpr (M == AdamMode::Decoupled) pk = __fmul_rn(pk, c.decay);
      const float mk = __fmaf_rn(gk, c.oneMinusBeta1, __fmul_rn(m[k], c.beta1));
      const float vk = __fmaf_rn(__fmul_rn(c.oneMinusBeta2, gk), gk, __fmul_rn(v[k], c.beta2));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vk), c.biasCorrection2Sqrt), c.eps);
      pk = __fadd_rn(pk, __fdiv_rn(__fmul_rn(c.negStepSize, mk), denom));
      param[i] = pk;
      expAvg[i] = mk;
      expAvgSq[i] = vk;
      if constexpr (C != CopyKind::None) storeCopy<C>(copy, i, pk);
    }
  }
}

template <DType G, CopyKind C, AdamMode M>
cudaError_t launchAll(const AdamCoeffs& c, const TensorSlice* slices, std::size_t count,
                      cudaStream_t stream) {
  std::vector<std::int64_t> counts(count);
  for (std::size_t s = 0; s < count; ++s) counts[s] = slices[s].count;
  for (const PlannedLaunch& l :
       planLaunches(counts.data(), count, kMaxTensors, kMaxBlocks, kChunk)) {
    LaunchMeta meta{};
    for (std::size_t slot = 0; slot < l.tensors.size(); ++slot) {
      const TensorSlice& ts = slices[l.tensors[slot]];
      meta.param[slot] = ts.param;
      meta.expAvg[slot] = ts.expAvg;
      meta.expAvgSq[slot] = ts.expAvgSq;
      meta.grad[slot] = ts.grad;
      meta.copy[slot] = ts.copy;
      meta.count[slot] = ts.count;
    }
    for (std::size_t b = 0; b < l.blocks.size(); ++b) {
      meta.blockTensor[b] = static_cast<std::uint8_t>(l.blocks[b].slot);
      meta.blockChunk[b] = static_cast<std::int32_t>(l.blocks[b].chunk);
    }
    adamKernel<G, C, M><<<static_cast<unsigned>(l.blocks.size()), kThreads, 0, stream>>>(c, meta);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <DType G, CopyKind C>
cudaError_t byMode(const AdamCoeffs& c, const TensorSlice* s, std::size_t n, cudaStream_t st) {
  switch (c.mode) {
    case AdamMode::Plain:
      return launchAll<G, C, AdamMode::Plain>(c, s, n, st);
    case AdamMode::L2:
      return launchAll<G, C, AdamMode::L2>(c, s, n, st);
    case AdamMode::Decoupled:
      return launchAll<G, C, AdamMode::Decoupled>(c, s, n, st);
  }
  return cudaErrorInvalidValue;
}

template <DType G>
cudaError_t byCopy(const AdamCoeffs& c, CopyKind k, const TensorSlice* s, std::size_t n,
                   cudaStream_t st) {
  switch (k) {
    case CopyKind::None:
      return byMode<G, CopyKind::None>(c, s, n, st);
    case CopyKind::F32:
      return byMode<G, CopyKind::F32>(c, s, n, st);
    case CopyKind::F16:
      return byMode<G, CopyKind::F16>(c, s, n, st);
    case CopyKind::BF16:
      return byMode<G, CopyKind::BF16>(c, s, n, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launchAdam(const AdamCoeffs& coeffs, DType gradType, CopyKind copyKind,
                       const TensorSlice* slices, std::size_t count, cudaStream_t stream) {
  switch (gradType) {
    case DType::F32:
      return byCopy<DType::F32>(coeffs, copyKind, slices, count, stream);
    case DType::F16:
      return byCopy<DType::F16>(coeffs, copyKind, slices, count, stream);
    case DType::BF16:
      return byCopy<DType::BF16>(coeffs, copyKind, slices, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace zrt::optim::cuda
