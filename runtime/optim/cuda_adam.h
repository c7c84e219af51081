// Adam/AdamW on a CUDA device: one fused multi-tensor step (zrt_optim_cuda's kernel) over many
// tensors or slices in device memory, with the same features and the same bits as the CPU
// paths (adam.h): fp32 state, fp32/fp16/bf16 gradients, the gradient multiplier, and an
// optional fp32/fp16/bf16 copy of the updated parameter. Slices may point anywhere inside a
// tensor, so a caller can step part of a shard.
// The work is queued on `stream` (a CUDA stream from CudaDevice) and this call returns without
// waiting; the arrays must stay allocated until the stream has run it.
// Thread-safety: calls on different streams may come from different threads.
#pragma once

#include <cstddef>
#include <span>

#include "core/device.h"
#include "core/dtype.h"
#include "runtime/optim/adam.h"

namespace zrt::optim {

// One tensor or slice, all pointers in device memory.
struct CudaAdamTensor {
  float* param = nullptr;
  float* expAvg = nullptr;
  float* expAvgSq = nullptr;
  const void* grad = nullptr;
  void* paramCopy = nullptr;  // either every tensor of a call has a copy or none has
  std::size_t count = 0;
};

struct CudaAdamBatch {
  std::span<const CudaAdamTensor> tensors;
  DType gradType = DType::F32;
  DType copyType = DType::F16;  // when the tensors have paramCopy
};

// Queues one Adam/AdamW step (hyperparameters as adamStep) on `stream`. Throws
// InvalidArgument on bad hyperparameters, null arrays, a mix of tensors with and without a
// copy, or a stream that is not a CUDA stream (and always in a build without CUDA);
// ExternalError if the launch fails.
void cudaAdamStep(const AdamHyper& h, const CudaAdamBatch& batch, Stream& stream);

}  // namespace zrt::optim
