// Bytes of one rank by ledger tag (what they are for) and place (where they live): the shape in
// which zrt-ladder holds both a prediction (zrt-plan's ledger summed by tag) and a measurement
// (zrt-train's memory ledger), so the two are compared cell by cell. Plain data; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/memory_ledger.h"

namespace zrt::ladder {

struct MemoryBytes {
  std::array<std::array<std::uint64_t, kNumMemPlaces>, kNumMemTags> cells{};

  std::uint64_t get(MemTag tag, MemPlace place) const {
    return cells[static_cast<int>(tag)][static_cast<int>(place)];
  }
  void add(MemTag tag, MemPlace place, std::uint64_t bytes) {
    cells[static_cast<int>(tag)][static_cast<int>(place)] += bytes;
  }
  // Every tag in one place.
  std::uint64_t total(MemPlace place) const;
  // Parameters, gradients and optimizer state (ZeRO's model states) in one place; gathered
  // stage-3 copies are buffers, not model states.
  std::uint64_t modelStates(MemPlace place) const;
  // Pinned plus pageable host memory.
  std::uint64_t host() const { return total(MemPlace::PinnedHost) + total(MemPlace::Host); }
  std::uint64_t hostModelStates() const {
    return modelStates(MemPlace::PinnedHost) + modelStates(MemPlace::Host);
  }
};

bool isModelState(MemTag tag);

// The five parts a ladder chart stacks: parameters, gradients, optimizer state, activations,
// and buffers (gathered parameters, comm buckets, swap buffers and the engine's workspace,
// "other").
enum class ChartPart : int { Parameters = 0, Gradients, OptimizerState, Activations, Buffers };
inline constexpr int kNumChartParts = 5;
ChartPart chartPartOf(MemTag tag);
std::string_view nameOf(ChartPart part);

// A place's bytes by chart part.
std::array<std::uint64_t, kNumChartParts> chartParts(const MemoryBytes& bytes, MemPlace place);

}  // namespace zrt::ladder
