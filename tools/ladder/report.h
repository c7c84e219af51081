// zrt-ladder's outputs: the table (one row per rung), the per-cell detail behind it, and the
// JSON document (docs/tuning.md lists its keys). Pure functions; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/ladder/ladder_result.h"

namespace zrt::ladder {

// One row per rung: levers, predicted and measured device peak and model states with their
// differences, measured host and NVMe bytes, step time, tokens/s, whether it fits the budget,
// and the agreement ("ok" or what disagrees and where). Rungs that did not run say why.
std::string formatTable(const LadderResult& result);

// Per rung, every ledger cell (tag, place) either side has: plan, ledger, difference.
std::string formatDetail(const LadderResult& result);

// {"model", "ranks", "budget_bytes", "steps", "trainer", "tolerances", "rungs": [{"name", "id",
//  "status", "note", "command", "micro_batch", "gradient_accumulation_steps", "predicted":
//  {"device_peak", "host", "nvme", "cells"}, "measured": {...}, "checks": [...], "agree",
//  "step_seconds", "tokens_per_second", "fits", "predicted_fits"}]}; bytes are per rank.
nlohmann::json toJson(const LadderResult& result);

}  // namespace zrt::ladder
