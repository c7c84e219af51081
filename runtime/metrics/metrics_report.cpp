#include "runtime/metrics/metrics_report.h"

#include <cstring>
#include <type_traits>

#include "comm/comm_stats.h"
#include "runtime/metrics/prometheus_text.h"

namespace zrt::metrics {

static_assert(std::is_trivially_copyable_v<RankMetrics> && sizeof(RankMetrics) % 2 == 0,
              "RankMetrics travels as raw 2-byte words");

void readLedger(const MemoryLedger& ledger, RankMetrics& m) {
  for (int t = 0; t < kNumMemTags; ++t)
    for (int p = 0; p < kNumMemPlaces; ++p)
      m.ledgerBytes[static_cast<std::size_t>(t)][static_cast<std::size_t>(p)] =
          static_cast<double>(ledger.get(static_cast<MemTag>(t), static_cast<MemPlace>(p)).current);
  for (int p = 0; p < kNumMemPlaces; ++p)
    m.ledgerPeakBytes[static_cast<std::size_t>(p)] = static_cast<double>(ledger.total(static_cast<MemPlace>(p)).peak);
}

void readCommStats(const comm::CommStats& stats, RankMetrics& m) {
  for (int k = 0; k < comm::kNumOpKinds; ++k) {
    const comm::OpStats s = stats.get(static_cast<comm::OpKind>(k));
    const auto i = static_cast<std::size_t>(k);
    m.collectiveCalls[i] = static_cast<double>(s.calls);
    m.collectiveBytes[i] = static_cast<double>(s.bytes);
    m.collectiveSeconds[i] = s.seconds;
  }
}

std::vector<RankMetrics> gatherRankMetrics(comm::Communicator& comm, const RankMetrics& mine) {
  // The communicator gathers floating-point types only; a 2-byte type is moved, never converted,
  // so the struct's bytes arrive as they were sent.
  std::vector<RankMetrics> all(static_cast<std::size_t>(comm.size()));
  comm.allGatherAsync(&mine, all.data(), sizeof(RankMetrics) / 2, DType::F16).wait();
  return all;
}

std::string renderMetrics(const std::vector<RankMetrics>& ranks) {
  PrometheusText t;
  const auto G = MetricType::Gauge;
  const auto C = MetricType::Counter;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankMetrics& m = ranks[r];
    const std::string rank = std::to_string(r);
    const Labels l{{"rank", rank}};
    t.add("zrt_steps_total", "Optimizer steps done (a resumed run counts the checkpoint's).", C, l, m.steps);
    t.add("zrt_step_seconds", "Wall time of the last step, forward to optimizer.", G, l, m.stepSeconds);
    t.add("zrt_loss", "Loss of the last step, as the training program reports it.", G, l, m.loss);
    t.add("zrt_loss_scale", "Loss scale the last step's gradients carried (1 without fp16).", G, l, m.lossScale);
    t.add("zrt_learning_rate", "Learning rate of parameter group 0 in the last step.", G, l, m.lr);
    t.add("zrt_comm_wait_seconds", "Time the last step waited for communication not hidden by compute.", G, l,
          m.commWaitSeconds);
    t.add("zrt_io_wait_seconds", "Time the last step's optimizer waited on NVMe.", G, l, m.ioWaitSeconds);
    for (int tag = 0; tag < kNumMemTags; ++tag)
      for (int p = 0; p < kNumMemPlaces; ++p)
        t.add("zrt_memory_bytes", "Bytes held now, by what they are for (tag) and where they live (place), from the ledger.",
              G,
              {{"rank", rank},
               {"tag", std::string(nameOf(static_cast<MemTag>(tag)))},
               {"place", std::string(nameOf(static_cast<MemPlace>(p)))}},
              m.ledgerBytes[static_cast<std::size_t>(tag)][static_cast<std::size_t>(p)]);
    for (int p = 0; p < kNumMemPlaces; ++p)
      t.add("zrt_memory_peak_bytes", "Peak of the bytes held in a place, all tags together, from the ledger.", G,
            {{"rank", rank}, {"place", std::string(nameOf(static_cast<MemPlace>(p)))}},
            m.ledgerPeakBytes[static_cast<std::size_t>(p)]);
    for (int k = 0; k < comm::kNumOpKinds; ++k) {
      const auto i = static_cast<std::size_t>(k);
      if (m.collectiveCalls[i] == 0) continue;
      const Labels ol{{"rank", rank}, {"op", std::string(comm::nameOf(static_cast<comm::OpKind>(k)))}};
      t.add("zrt_collective_calls_total", "Collectives run on the training communicator.", C, ol, m.collectiveCalls[i]);
      t.add("zrt_collective_bytes_total", "Bytes of those collectives (nccl-tests' size: the full buffer).", C, ol,
            m.collectiveBytes[i]);
      t.add("zrt_collective_seconds_total", "Time those collectives ran, queueing excluded.", C, ol,
            m.collectiveSeconds[i]);
    }
  }
  return t.str();
}

}  // namespace zrt::metrics
