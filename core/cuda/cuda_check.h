// ZRT_CHECK_CUDA: every CUDA runtime call goes through it. A failure throws ExternalError with
// "[rank R] file:line", the call's text, and CUDA's own name and description of the error.
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

#define ZRT_CHECK_CUDA(call)                                                                 \
  do {                                                                                       \
    cudaError_t zrt_cuda_err_ = (call);                                                      \
    if (zrt_cuda_err_ != cudaSuccess) {                                                      \
      ZRT_THROW(::zrt::ExternalError, "CUDA call `" #call "` failed: ",                      \
                cudaGetErrorName(zrt_cuda_err_), ": ", cudaGetErrorString(zrt_cuda_err_));   \
    }                                                                                        \
  } while (0)
