#include "runtime/device_kernels.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace zrt {
namespace {

// The optimizer state arrays' elements [offset, offset + count) must exist.
void checkRange(const char* what, std::size_t offset, std::size_t count, std::size_t size) {
  if (offset > size || count > size - offset)
    ZRT_THROW(InvalidArgument, what, ": elements [", offset, ", ", offset + count,
              ") run past the state's ", size);
}

}  // namespace

AdamStepCoeffs deviceAdamCoeffs(const optim::AdamCoeffs& c) {
  AdamStepCoeffs d;
  d.gradScale = c.gradScale;
  d.weightDecay = c.weightDecay;
  d.decay = c.decay;
  d.beta1 = c.beta1;
  d.oneMinusBeta1 = c.oneMinusBeta1;
  d.beta2 = c.beta2;
  d.oneMinusBeta2 = c.oneMinusBeta2;
  d.biasCorrection2Sqrt = c.biasCorrection2Sqrt;
  d.eps = c.eps;
  d.negStepSize = c.negStepSize;
  d.mode = static_cast<std::int32_t>(c.mode);
  return d;
}

void launchAdamStep(Device& device, Stream& stream, const optim::AdamHyper& h,
                    const optim::AdamState& s, std::size_t offset, std::size_t count) {
  const AdamStepCoeffs c = deviceAdamCoeffs(optim::adamCoefficients(h));
  if (count == 0) return;
  checkRange("launchAdamStep", offset, count, s.size);
  const std::size_t gs = dtypeSize(s.gradType);
  void* copy =
      s.paramCopy ? static_cast<char*>(s.paramCopy) + offset * dtypeSize(s.copyType) : nullptr;
  device.launch(
      adamStepArgs(c, s.param + offset, s.expAvg + offset, s.expAvgSq + offset, s.gradType,
                   static_cast<const char*>(s.grad) + offset * gs, count, s.copyType, copy),
      stream);
}

SgdStepCoeffs deviceSgdCoeffs(const optim::SgdCoeffs& c) {
  SgdStepCoeffs d;
  d.gradScale = c.gradScale;
  d.weightDecay = c.weightDecay;
  d.momentum = c.momentum;
  d.oneMinusDampening = c.oneMinusDampening;
  d.negLr = c.negLr;
  d.hasWeightDecay = c.hasWeightDecay;
  d.momentumMode = static_cast<std::int32_t>(c.momentumMode);
  d.nesterov = c.nesterov;
  return d;
}

void launchSgdStep(Device& device, Stream& stream, const optim::SgdHyper& h,
                   const optim::SgdState& s, std::size_t offset, std::size_t count) {
  const SgdStepCoeffs c = deviceSgdCoeffs(optim::sgdCoefficients(h));
  if (count == 0) return;
  checkRange("launchSgdStep", offset, count, s.size);
  if (c.momentumMode != 0 && !s.momentumBuffer)
    ZRT_THROW(InvalidArgument, "launchSgdStep: momentum ", h.momentum, " needs a momentum buffer");
  const std::size_t gs = dtypeSize(s.gradType);
  void* copy =
      s.paramCopy ? static_cast<char*>(s.paramCopy) + offset * dtypeSize(s.copyType) : nullptr;
  float* momentum = c.momentumMode != 0 ? s.momentumBuffer + offset : nullptr;
  device.launch(sgdStepArgs(c, s.param + offset, momentum, s.gradType,
                            static_cast<const char*>(s.grad) + offset * gs, count, s.copyType, copy),
                stream);
}

DeviceNormPart::DeviceNormPart(Device& device, std::size_t maxCount)
    : device_(device), maxChunks_(std::max<std::size_t>(1, sumSquaresChunks(maxCount))) {
  sums_ = device.allocate((maxChunks_ + 2) * sizeof(double), MemTag::Other);
  pinned_ = device.allocatePinned(2 * sizeof(double), MemTag::Other);
}

void DeviceNormPart::launch(Stream& stream, DType t, const void* data, std::size_t count) {
  const std::size_t chunks = sumSquaresChunks(count);
  if (chunks > maxChunks_)
    ZRT_THROW(InvalidArgument, "DeviceNormPart: ", count, " elements need ", chunks,
              " partial sums; room was made for ", maxChunks_);
  double* partials = sums_.as<double>();
  device_.launch(sumSquaresArgs(t, data, count, partials), stream);
  device_.launch(reduceSquaresArgs(partials, chunks, partials + maxChunks_), stream);
}

NormPart DeviceNormPart::take(Stream& stream) {
  device_.copyAsync(pinned_.data(), sums_.as<double>() + maxChunks_, 2 * sizeof(double), stream);
  stream.synchronize();  // for the copy of the two doubles the host reads next
  NormPart p;
  std::memcpy(&p.sumSq, pinned_.as<double>(), sizeof(double));
  std::memcpy(&p.nonFinite, pinned_.as<double>() + 1, sizeof(double));
  return p;
}

}  // namespace zrt
