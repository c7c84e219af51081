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

void addCommStats(const comm::CommStats& stats, RankMetrics& m) {
  for (int k = 0; k < comm::kNumOpKinds; ++k) {
    const comm::OpStats s = stats.get(static_cast<comm::OpKind>(k));
    const auto i = static_cast<std::size_t>(k);
    m.collectiveCalls[i] += static_cast<double>(s.calls);
    m.collectiveBytes[i] += static_cast<double>(s.bytes);
    m.collectiveSeconds[i] += s.seconds;
  }
}

void noteInFlight(const comm::InFlight& op, RankMetrics& m) {
  if (!op.running || (m.commOldestOp >= 0 && op.seconds <= m.commOldestSeconds)) return;
  m.commOldestOp = static_cast<double>(static_cast<int>(op.kind));
  m.commOldestSeconds = op.seconds;
}

void readIoStats(const offload::EngineStats& s, const RankMetrics& previous, double seconds, RankMetrics& m) {
  m.io = 1;
  m.ioBytesRead = static_cast<double>(s.bytesRead);
  m.ioBytesWritten = static_cast<double>(s.bytesWritten);
  m.ioReadGBps = seconds > 0 ? (m.ioBytesRead - previous.ioBytesRead) / seconds / 1e9 : 0;
  m.ioWriteGBps = seconds > 0 ? (m.ioBytesWritten - previous.ioBytesWritten) / seconds / 1e9 : 0;
  m.ioQueueCapacity = static_cast<double>(s.queueCapacity);
  m.ioTransfersInFlight = static_cast<double>(s.transfersInFlight);
  m.ioMaxTransfersInFlight = static_cast<double>(s.maxTransfersInFlight);
  m.ioRequestsOutstanding = static_cast<double>(s.requestsOutstanding);
  m.ioOldestDir = s.requestsOutstanding > 0 ? static_cast<double>(static_cast<int>(s.oldestRequestDir)) : -1;
  m.ioOldestSeconds = s.requestsOutstanding > 0 ? s.oldestRequestSeconds : 0;
}

std::vector<RankMetrics> gatherRankMetrics(comm::Communicator& comm, const RankMetrics& mine) {
  // The communicator gathers floating-point types only; a 2-byte type is moved, never converted,
  // so the struct's bytes arrive as they were sent.
  std::vector<RankMetrics> all(static_cast<std::size_t>(comm.size()));
  comm.allGatherAsync(&mine, all.data(), sizeof(RankMetrics) / 2, DType::F16).wait();
  return all;
}

std::string renderMetrics(const std::vector<RankMetrics>& ranks) {
  const char* kOldestHelp =
      "How long the oldest operation still outstanding at the report had waited: the collective running on "
      "the rank's lanes (source comm) or the NVMe request (source io); 0 and op none when nothing was.";
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
      const comm::OpStats s{static_cast<std::uint64_t>(m.collectiveCalls[i]),
                            static_cast<std::uint64_t>(m.collectiveBytes[i]), m.collectiveSeconds[i]};
      t.add("zrt_collective_busbw_gbps",
            "Bus bandwidth of those collectives since start, GB/s: bytes / seconds x nccl-tests' factor "
            "(2(n-1)/n all-reduce, (n-1)/n reduce-scatter and all-gather, 1 broadcast).",
            G, ol, comm::busbwGBps(s, static_cast<comm::OpKind>(k), static_cast<int>(ranks.size())));
    }
    {
      const std::string op = m.commOldestOp < 0 ? "none"
                                                : std::string(comm::nameOf(static_cast<comm::OpKind>(
                                                      static_cast<int>(m.commOldestOp))));
      t.add("zrt_oldest_wait_seconds", kOldestHelp, G, {{"rank", rank}, {"source", "comm"}, {"op", op}}, m.commOldestSeconds);
    }
    if (m.io == 0) continue;
    {
      const std::string op = m.ioOldestDir < 0 ? "none"
                                               : std::string(offload::nameOf(static_cast<offload::IoDir>(
                                                     static_cast<int>(m.ioOldestDir))));
      t.add("zrt_oldest_wait_seconds", kOldestHelp, G, {{"rank", rank}, {"source", "io"}, {"op", op}}, m.ioOldestSeconds);
    }
    const Labels rd{{"rank", rank}, {"dir", "read"}}, wr{{"rank", rank}, {"dir", "write"}};
    const char* bytesHelp = "Bytes the NVMe engine moved since start (caller bytes, padding excluded).";
    t.add("zrt_io_bytes_total", bytesHelp, C, rd, m.ioBytesRead);
    t.add("zrt_io_bytes_total", bytesHelp, C, wr, m.ioBytesWritten);
    const char* rateHelp = "NVMe engine rate since the previous report, GB/s (1e9 bytes/s).";
    t.add("zrt_io_gbps", rateHelp, G, rd, m.ioReadGBps);
    t.add("zrt_io_gbps", rateHelp, G, wr, m.ioWriteGBps);
    t.add("zrt_io_queue_capacity", "Transfers the NVMe engine can hold in flight (rings x queue_depth).", G, l,
          m.ioQueueCapacity);
    t.add("zrt_io_transfers_in_flight", "Transfers in the NVMe engine's rings at the report.", G, l,
          m.ioTransfersInFlight);
    t.add("zrt_io_transfers_in_flight_max", "The most transfers in the NVMe engine's rings at once since start.", G, l,
          m.ioMaxTransfersInFlight);
    t.add("zrt_io_requests_outstanding", "NVMe requests accepted and not finished at the report.", G, l,
          m.ioRequestsOutstanding);
  }
  return t.str();
}

}  // namespace zrt::metrics
