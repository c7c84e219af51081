#include "runtime/optim/cuda_adam.h"

#include <string>
#include <vector>

#include "core/build_config.h"
#include "core/error.h"

#if ZRT_HAVE_CUDA
#include "core/cuda/cuda_check.h"
#include "runtime/optim/cuda/adam_launch.h"
#endif

namespace zrt::optim {

void cudaAdamStep(const AdamHyper& h, const CudaAdamBatch& batch, Stream& stream) {
  const AdamCoeffs coeffs = adamCoefficients(h);
#if ZRT_HAVE_CUDA
  if (stream.native() == nullptr) {
    ZRT_THROW(InvalidArgument,
              "cudaAdamStep: the stream is not a CUDA stream (create it from "
              "a cuda:N device)");
  }
  std::vector<cuda::TensorSlice> slices;
  slices.reserve(batch.tensors.size());
  std::size_t withCopy = 0;
  for (std::size_t i = 0; i < batch.tensors.size(); ++i) {
    const CudaAdamTensor& t = batch.tensors[i];
    if (t.count == 0) continue;
    if (!t.param || !t.expAvg || !t.expAvgSq || !t.grad) {
      ZRT_THROW(InvalidArgument, "cudaAdamStep: tensor ", i, " (", t.count,
                " elements) has a null param, expAvg, expAvgSq or grad");
    }
    withCopy += t.paramCopy != nullptr;
    slices.push_back(
        {t.param, t.expAvg, t.expAvgSq, t.grad, t.paramCopy, static_cast<std::int64_t>(t.count)});
  }
  if (withCopy != 0 && withCopy != slices.size()) {
    ZRT_THROW(InvalidArgument, "cudaAdamStep: ", withCopy, " of ", slices.size(),
              " non-empty tensors have a paramCopy; either all or none must");
  }
  if (slices.empty()) return;
  const CopyKind copy =
      withCopy ? static_cast<CopyKind>(static_cast<int>(batch.copyType)) : CopyKind::None;
  ZRT_CHECK_CUDA(cuda::launchAdam(coeffs, batch.gradType, copy, slices.data(), slices.size(),
                                  static_cast<cudaStream_t>(stream.native())));
#else
  (void)coeffs;
  (void)batch;
  (void)stream;
  ZRT_THROW(InvalidArgument, "cudaAdamStep: this build of ZRT has no CUDA (ZRT_CUDA=OFF)");
#endif
}

}  // namespace zrt::optim
