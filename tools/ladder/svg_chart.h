// --svg: the ladder as a self-contained SVG bar chart. One row per rung: the measured device
// memory as a horizontal bar stacked by part (parameters, gradients, optimizer state,
// activations, buffers), a tick at the planner's predicted peak, the budget as a dashed line,
// and beside it the rung's step time as a second bar. Widths are proportional to the values on
// one scale per panel; every bar carries its value in data-* attributes, so a reader (or a
// test) can check the drawing against the numbers. Pure function; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/ladder/memory_bytes.h"

namespace zrt::ladder {

struct ChartBar {
  std::string label;  // "baseline (z0, 4 x 1)"
  bool ran = false;   // false: `note` is written instead of bars
  std::string note;
  std::array<std::uint64_t, kNumChartParts> parts{};  // measured device bytes by part
  std::uint64_t predicted = 0;                        // the plan's device peak
  double stepSeconds = 0;
};

// Rects: class "part" (data-rung, data-part, data-bytes), "step" (data-rung, data-seconds);
// lines: class "predicted" (data-rung, data-bytes), "budget" (data-bytes).
std::string ladderSvg(const std::vector<ChartBar>& bars, std::uint64_t budgetBytes, const std::string& title);

}  // namespace zrt::ladder
