// zrt-plan's outputs: the human-readable table, the JSON object for scripts, and the --explain
// text that prints every formula with its numbers substituted. Pure functions; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/plan/strategy.h"

namespace zrt::plan {

// The rule the recommendation follows, in words (printed and put in the JSON).
std::string recommendationRule();

// One row per candidate strategy: bytes per rank on the device by purpose, host and NVMe
// totals, whether it fits, the slowdown, and the recommendation below. `detail` adds each
// strategy's full purpose x place breakdown.
std::string formatTable(const Plan& plan, bool detail);

// {"model", "hardware", "training", "baseline", "rule", "strategies": [...], "recommended": id,
//  "recommendation": {...}}; docs/plan.md lists every key.
nlohmann::json planToJson(const Plan& plan);

// The formulas behind one evaluation, with the numbers substituted.
std::string explain(const Plan& plan, const Evaluation& e);


}  // namespace zrt::plan
