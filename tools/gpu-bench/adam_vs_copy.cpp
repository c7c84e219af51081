#include "tools/gpu-bench/adam_vs_copy.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "core/timing.h"
#include "runtime/optim/cuda_adam.h"

namespace zrt::gpubench {

AdamVsCopy::AdamVsCopy(Device& device, std::size_t params, DType gradType,
                       std::optional<DType> copyType)
    : device_(device),
      params_(params),
      gradType_(gradType),
      copyType_(copyType),
      bytesPerParam_(4 * 3 * 2 + dtypeSize(gradType) + (copyType ? dtypeSize(*copyType) : 0)) {
  if (params == 0) ZRT_THROW(InvalidArgument, "adam: --params must be > 0");
  stream_ = device.createStream();
  param_ = device.allocate(params * 4, MemTag::Parameters);
  expAvg_ = device.allocate(params * 4, MemTag::OptimizerState);
  expAvgSq_ = device.allocate(params * 4, MemTag::OptimizerState);
  grad_ = device.allocate(params * dtypeSize(gradType), MemTag::Gradients);
  if (copyType) paramCopy_ = device.allocate(params * dtypeSize(*copyType), MemTag::Parameters);
  const std::size_t copyBytes = bytesMoved() / 2;
  copyFrom_ = device.allocate(copyBytes, MemTag::Other);
  copyTo_ = device.allocate(copyBytes, MemTag::Other);
  // 0x3c in every byte: about 0.0115 as fp32 and 1.0 as fp16's high byte, finite everywhere, so
  // the step computes on ordinary numbers; the moments start at 0 as a fresh optimizer's do.
  device.memsetAsync(param_.data(), 0x3c, param_.bytes(), *stream_);
  device.memsetAsync(grad_.data(), 0x3c, grad_.bytes(), *stream_);
  device.memsetAsync(expAvg_.data(), 0, expAvg_.bytes(), *stream_);
  device.memsetAsync(expAvgSq_.data(), 0, expAvgSq_.bytes(), *stream_);
  if (paramCopy_) device.memsetAsync(paramCopy_.data(), 0, paramCopy_.bytes(), *stream_);
  device.memsetAsync(copyFrom_.data(), 1, copyBytes, *stream_);
  device.memsetAsync(copyTo_.data(), 1, copyBytes, *stream_);
  stream_->synchronize();
  hyper_.weightDecay = 0.01;
  hyper_.decoupledWeightDecay = true;
}

PairedSeconds AdamVsCopy::turn() {
  optim::CudaAdamTensor t{param_.as<float>(),
                          expAvg_.as<float>(),
                          expAvgSq_.as<float>(),
                          grad_.data(),
                          paramCopy_ ? paramCopy_.data() : nullptr,
                          params_};
  optim::CudaAdamBatch batch{{&t, 1}, gradType_, copyType_.value_or(DType::F16)};
  PairedSeconds s;
  auto t0 = std::chrono::steady_clock::now();
  optim::cudaAdamStep(hyper_, batch, *stream_);
  stream_->synchronize();
  s.zrt = secondsSince(t0);
  ++hyper_.step;
  t0 = std::chrono::steady_clock::now();
  device_.copyAsync(copyTo_.data(), copyFrom_.data(), copyFrom_.bytes(), *stream_);
  stream_->synchronize();
  s.cuda = secondsSince(t0);
  return s;
}

void AdamVsCopy::verify() {
  float first = 0;
  device_.copyAsync(&first, param_.data(), sizeof first, *stream_);
  stream_->synchronize();
  const auto word = std::uint32_t{0x3c3c3c3c};
  double g = std::bit_cast<float>(word);
  if (gradType_ == DType::F16) g = halfToFloat(0x3c3c);
  if (gradType_ == DType::BF16) g = bf16ToFloat(0x3c3c);
  // With one gradient every step the bias-corrected moments are g and g squared, so each step
  // decays the parameter by lr x weight decay and moves it by lr g / (|g| + eps).
  double p = std::bit_cast<float>(word);
  for (std::int64_t t = 1; t < hyper_.step; ++t)
    p = p * (1 - hyper_.lr * hyper_.weightDecay) - hyper_.lr * g / (std::fabs(g) + hyper_.eps);
  if (!(std::fabs(first - p) <= 1e-5 * std::max(1.0, std::fabs(p))))
    ZRT_THROW(ExternalError, "adam: parameter 0 is ", first, " after ", hyper_.step - 1,
              " steps where float64 AdamW gives ", p, ": the step did not compute what was timed");
}

}  // namespace zrt::gpubench
