#include "batches.h"

#include <cstring>

#include "core/error.h"

namespace zrt::trainer {

std::int64_t sampleRange(std::int64_t bytes, int seqLen) { return bytes - seqLen - 1; }

std::int64_t sampleStart(std::int64_t step, std::int64_t j, std::int64_t global, int seqLen,
                         std::int64_t bytes) {
  const std::int64_t range = sampleRange(bytes, seqLen);
  ZRT_ENFORCE(range > 0, "a split of ", bytes, " bytes holds no sample of ", seqLen, " + 1 bytes");
  // The product (s*G + j)*T passes 2^63 on long runs over large files; 128 bits hold it for any
  // step and file a run can reach.
  using Wide = __int128;
  const Wide offset = (Wide{step} * global + j) * seqLen;
  return static_cast<std::int64_t>(offset % range);
}

std::int64_t sampleIndex(std::int64_t microStep, std::int64_t rank, std::int64_t b,
                         const BatchSplit& split) {
  return microStep * (split.micro * split.world) + rank * split.micro + b;
}

void fillMicroBatch(std::span<const std::uint8_t> data, int seqLen, const BatchSplit& split,
                    std::int64_t step, std::int64_t microStep, std::int64_t rank,
                    std::uint8_t* inputs, std::uint8_t* targets) {
  const auto bytes = static_cast<std::int64_t>(data.size());
  for (std::int64_t b = 0; b < split.micro; ++b) {
    const std::int64_t j = sampleIndex(microStep, rank, b, split);
    const std::int64_t start = sampleStart(step, j, split.global(), seqLen, bytes);
    std::memcpy(inputs + b * seqLen, data.data() + start, static_cast<std::size_t>(seqLen));
    std::memcpy(targets + b * seqLen, data.data() + start + 1, static_cast<std::size_t>(seqLen));
  }
}

}  // namespace zrt::trainer
