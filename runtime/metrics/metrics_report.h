// The per-step metrics report: what each rank knows at a step boundary (step count and time,
// loss, loss scale, its ledger's bytes by tag and place, its communicator's collective bytes),
// gathered to every rank in one small collective, and rendered as Prometheus text with a
// rank="r" label (metrics_server.h serves it; docs/metrics.md names every metric).
// Thread-safety: plain data and free functions; gatherRankMetrics is collective.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/communicator.h"
#include "core/memory_ledger.h"

namespace zrt::metrics {

struct RankMetrics {
  double steps = 0;             // optimizer steps done so far (a resumed run counts the checkpoint's)
  double stepSeconds = 0;       // the last step's wall time, forward to optimizer
  double loss = 0;              // the last step's loss as the caller computed it
  double lossScale = 1;
  double lr = 0;
  double commWaitSeconds = 0;   // StepReport::commSeconds of the last step
  double ioWaitSeconds = 0;     // StepReport::ioSeconds of the last step
  std::array<std::array<double, kNumMemPlaces>, kNumMemTags> ledgerBytes{};  // current, [tag][place]
  std::array<double, kNumMemPlaces> ledgerPeakBytes{};                        // peak of the place's total
  std::array<double, comm::kNumOpKinds> collectiveCalls{};
  std::array<double, comm::kNumOpKinds> collectiveBytes{};
  std::array<double, comm::kNumOpKinds> collectiveSeconds{};
};

// Fills the ledger's and the communicator's fields of `m` from their current values.
void readLedger(const MemoryLedger& ledger, RankMetrics& m);
void readCommStats(const comm::CommStats& stats, RankMetrics& m);

// Every rank's report, in rank order, on every rank. Collective: every rank calls it at the same
// point of the step. The values travel bit for bit (no arithmetic on the way).
std::vector<RankMetrics> gatherRankMetrics(comm::Communicator& comm, const RankMetrics& mine);

// The Prometheus text of every rank's report.
std::string renderMetrics(const std::vector<RankMetrics>& ranks);

}  // namespace zrt::metrics
