// The interface between zrt_runtime and the zrt_optim_cuda kernel library: plain data and one
// launcher. It checks nothing (cuda_adam.cpp validates) and returns CUDA's error code rather
// than throwing, so the kernel library depends on nothing but the CUDA runtime.
// Thread-safety: launches on different streams may be queued from different threads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "runtime/optim/kernel_args.h"

namespace zrt::optim::cuda {

// One tensor (or slice) in device memory; copy is null when no copy is written.
struct TensorSlice {
  float* param;
  float* expAvg;
  float* expAvgSq;
  const void* grad;
  void* copy;
  std::int64_t count;
};

// Queues the fused Adam/AdamW step for every slice on `stream`, in as few launches as the
// kernel-parameter limit allows (each launch carries up to 36 slices and 320 blocks of 16384
// elements). Every slice has gradients of `gradType` and, unless copyKind is None, a copy of
// that kind. Returns the first launch error, or cudaSuccess.
cudaError_t launchAdam(const AdamCoeffs& coeffs, DType gradType, CopyKind copyKind,
                       const TensorSlice* slices, std::size_t count, cudaStream_t stream);

}  // namespace zrt::optim::cuda
