#include "rank_mean.h"

namespace zrt::trainer {

std::vector<double> meanOverRanks(comm::Communicator& comm, const std::vector<double>& mine) {
  const std::size_t n = mine.size();
  std::vector<double> mean(n, 0.0);
  if (n == 0) return mean;
  std::vector<float> parts(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto high = static_cast<float>(mine[i]);
    parts[2 * i] = high;
    parts[2 * i + 1] = static_cast<float>(mine[i] - high);
  }
  std::vector<float> all(parts.size() * static_cast<std::size_t>(comm.size()));
  comm.allGather(parts.data(), all.data(), parts.size(), DType::F32);
  // Summed in rank order on every rank, so every rank holds the same bits.
  for (int r = 0; r < comm.size(); ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const float* p = all.data() + static_cast<std::size_t>(r) * 2 * n + 2 * i;
      mean[i] += double{p[0]} + double{p[1]};
    }
  for (double& m : mean) m /= comm.size();
  return mean;
}

}  // namespace zrt::trainer
