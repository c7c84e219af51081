// How the multi-tensor kernel's work is cut into launches: each launch carries at most
// maxTensors tensors (slots) and maxBlocks blocks, each block one chunk of one tensor. A tensor
// whose chunks do not fit in one launch continues in the next (in slot 0). Empty tensors are
// skipped. Plain data and a pure function, shared by the CUDA launcher and its CPU-side test.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zrt::optim::cuda {

// The kernel's limits: slots and blocks per launch (they fit the classic 4 KiB of kernel
// parameters) and elements per block.
inline constexpr int kMaxTensors = 36;
inline constexpr int kMaxBlocks = 320;
inline constexpr std::int64_t kChunk = 16384;

struct PlannedBlock {
  std::int32_t slot;   // index into PlannedLaunch::tensors
  std::int64_t chunk;  // elements [chunk * chunkElems, min(count, (chunk + 1) * chunkElems))
};

struct PlannedLaunch {
  std::vector<std::size_t> tensors;  // input index of each slot
  std::vector<PlannedBlock> blocks;
};

inline std::vector<PlannedLaunch> planLaunches(const std::int64_t* counts, std::size_t n,
                                               int maxTensors, int maxBlocks,
                                               std::int64_t chunkElems) {
  std::vector<PlannedLaunch> plan;
  PlannedLaunch cur;
  for (std::size_t t = 0; t < n; ++t) {
    if (counts[t] <= 0) continue;
    cur.tensors.push_back(t);
    const std::int64_t chunks = (counts[t] + chunkElems - 1) / chunkElems;
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      cur.blocks.push_back({static_cast<std::int32_t>(cur.tensors.size() - 1), ch});
      const bool lastChunk = ch + 1 == chunks;
      const bool full = static_cast<int>(cur.blocks.size()) == maxBlocks;
      if (full || (static_cast<int>(cur.tensors.size()) == maxTensors && lastChunk)) {
        plan.push_back(std::move(cur));
        cur = PlannedLaunch{};
        if (!lastChunk) cur.tensors.push_back(t);  // continues in the next launch, slot 0
      }
    }
  }
  if (!cur.blocks.empty()) plan.push_back(std::move(cur));
  return plan;
}

}  // namespace zrt::optim::cuda
