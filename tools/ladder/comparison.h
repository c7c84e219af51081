// Prediction against measurement for one rung: zrt-plan's model states must be within 5% of the
// ledger's in every place they live (device, host, NVMe), and its device total within 15% of the
// ledger's device peak. A check that fails names the ledger tag whose bytes differ most, so the
// table says where the planner and the runtime part ways instead of only that they do.
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/ladder/measurement.h"
#include "tools/ladder/memory_bytes.h"

namespace zrt::ladder {

struct Tolerances {
  double modelStates = 0.05;
  double overall = 0.15;
};

// (predicted - measured) / measured: +0.10 means the plan says 10% more than the run used.
// 0 when both are 0; +infinity when only the measurement is 0.
double relativeDifference(std::uint64_t predicted, std::uint64_t measured);

// "+12%", "-3%", "+0%", "+inf".
std::string formatDifference(double difference);

// The ledger cell (tag, place) where prediction and measurement differ most.
struct Gap {
  MemTag tag = MemTag::Other;
  MemPlace place = MemPlace::Device;
  std::uint64_t predicted = 0, measured = 0;
};

struct Check {
  std::string what;  // "model states, device", "device peak"
  std::uint64_t predicted = 0, measured = 0;
  double difference = 0;  // relativeDifference(predicted, measured)
  double tolerance = 0;
  std::optional<Gap> largestGap;  // among the cells this check sums
  bool ok() const;
};

struct Agreement {
  std::vector<Check> checks;
  bool ok() const;
  // "ok", or each failing check with its difference and largest gap:
  // "device peak +23% (comm buckets, device: plan 6.37 MiB, ledger 0 B)".
  std::string summary() const;
};

// Checks, in order: model states on the device (always), in host memory (pinned + pageable) and
// on NVMe (when either side has any), and the device peak: `predictedDevicePeak` against the
// ledger's total row.
Agreement compare(const MemoryBytes& predicted, std::uint64_t predictedDevicePeak,
                  const LedgerReading& measured, const Tolerances& tolerances = {});

}  // namespace zrt::ladder
