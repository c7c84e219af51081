// The per-step metrics report: what each rank knows at a step boundary (step count and time,
// loss, loss scale, its ledger's bytes by tag and place, its communicators' collective bytes
// and time, its NVMe engine's bytes and queue, the oldest operation still outstanding),
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
#include "offload/offload_engine.h"

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
  // The collective running longest now on this rank's lanes (the watchdog's clock): its kind
  // (an OpKind, or -1 for none) and seconds so far.
  double commOldestOp = -1;
  double commOldestSeconds = 0;
  // The NVMe engine (io > 0 when there is one): bytes moved since start, the rate over the time
  // since the previous report, the queue in use, and the oldest request outstanding (its IoDir,
  // or -1 for none).
  double io = 0;
  double ioBytesRead = 0;
  double ioBytesWritten = 0;
  double ioReadGBps = 0;
  double ioWriteGBps = 0;
  double ioQueueCapacity = 0;
  double ioTransfersInFlight = 0;
  double ioMaxTransfersInFlight = 0;
  double ioRequestsOutstanding = 0;
  double ioOldestDir = -1;
  double ioOldestSeconds = 0;
};

// Fills the ledger's and the communicator's fields of `m` from their current values.
void readLedger(const MemoryLedger& ledger, RankMetrics& m);
void readCommStats(const comm::CommStats& stats, RankMetrics& m);
// Adds a second lane's collectives to those already read (the Engine's gather lane).
void addCommStats(const comm::CommStats& stats, RankMetrics& m);
// Keeps `op` as the oldest wait when it has run longer than the one noted so far.
void noteInFlight(const comm::InFlight& op, RankMetrics& m);
// The NVMe engine's fields. The rates are over `seconds` since `previous` (the last report's
// figures; the rates are 0 when seconds is not positive).
void readIoStats(const offload::EngineStats& stats, const RankMetrics& previous, double seconds, RankMetrics& m);

// Every rank's report, in rank order, on every rank. Collective: every rank calls it at the same
// point of the step. The values travel bit for bit (no arithmetic on the way).
std::vector<RankMetrics> gatherRankMetrics(comm::Communicator& comm, const RankMetrics& mine);

// The Prometheus text of every rank's report.
std::string renderMetrics(const std::vector<RankMetrics>& ranks);

}  // namespace zrt::metrics
