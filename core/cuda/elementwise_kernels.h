// The CUDA launcher of core/elementwise.h's kernels: what CudaDevice::launch calls. Returns
// CUDA's error code (the caller checks it with ZRT_CHECK_CUDA), so the kernel library depends on
// nothing but the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include "core/elementwise.h"

namespace zrt::cuda {

cudaError_t launchElementwise(const ElementwiseArgs& args, cudaStream_t stream);

}  // namespace zrt::cuda
