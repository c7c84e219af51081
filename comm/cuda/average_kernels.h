// The averaging kernels of core/element_arithmetic.h (divideBy, addDivided) for buffers in CUDA
// device memory, queued on a stream: what a bucketer's DeviceQueue runs on the `cuda` device.
// Plain data and launchers that return CUDA's error code (the caller checks it with
// ZRT_CHECK_CUDA), so the kernel library depends on nothing but the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace zrt::comm::cuda {

// buf[i] = buf[i] / divisor in fp32, rounded once.
cudaError_t launchDivide(DType dtype, void* buf, std::size_t count, float divisor, cudaStream_t stream);
// dst[i] = dst[i] + src[i] / divisor in fp32, rounded once.
cudaError_t launchAddDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor,
                             cudaStream_t stream);

}  // namespace zrt::comm::cuda
