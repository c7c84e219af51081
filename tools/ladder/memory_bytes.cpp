#include "tools/ladder/memory_bytes.h"

namespace zrt::ladder {

std::uint64_t MemoryBytes::total(MemPlace place) const {
  std::uint64_t n = 0;
  for (int t = 0; t < kNumMemTags; ++t) n += get(static_cast<MemTag>(t), place);
  return n;
}

std::uint64_t MemoryBytes::modelStates(MemPlace place) const {
  std::uint64_t n = 0;
  for (int t = 0; t < kNumMemTags; ++t)
    if (isModelState(static_cast<MemTag>(t))) n += get(static_cast<MemTag>(t), place);
  return n;
}

bool isModelState(MemTag tag) {
  return tag == MemTag::Parameters || tag == MemTag::Gradients || tag == MemTag::OptimizerState;
}

ChartPart chartPartOf(MemTag tag) {
  switch (tag) {
    case MemTag::Parameters: return ChartPart::Parameters;
    case MemTag::Gradients: return ChartPart::Gradients;
    case MemTag::OptimizerState: return ChartPart::OptimizerState;
    case MemTag::Activations: return ChartPart::Activations;
    case MemTag::GatheredParameters:
    case MemTag::CommBuckets:
    case MemTag::SwapBuffers:
    case MemTag::Other: return ChartPart::Buffers;
  }
  return ChartPart::Buffers;
}

std::string_view nameOf(ChartPart part) {
  switch (part) {
    case ChartPart::Parameters: return "parameters";
    case ChartPart::Gradients: return "gradients";
    case ChartPart::OptimizerState: return "optimizer state";
    case ChartPart::Activations: return "activations";
    case ChartPart::Buffers: return "buffers";
  }
  return "?";
}

std::array<std::uint64_t, kNumChartParts> chartParts(const MemoryBytes& bytes, MemPlace place) {
  std::array<std::uint64_t, kNumChartParts> parts{};
  for (int t = 0; t < kNumMemTags; ++t) {
    const auto tag = static_cast<MemTag>(t);
    parts[static_cast<int>(chartPartOf(tag))] += bytes.get(tag, place);
  }
  return parts;
}

}  // namespace zrt::ladder
