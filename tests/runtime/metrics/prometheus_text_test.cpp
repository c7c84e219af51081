// The Prometheus text format (runtime/metrics/prometheus_text.h) against the exposition format's
// rules written out by hand: escapes, one HELP and TYPE per metric, value spelling; and the
// per-step report's rendering (metrics_report.h) of two ranks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/metrics/metrics_report.h"
#include "runtime/metrics/prometheus_text.h"

using namespace zrt;
using namespace zrt::metrics;

namespace {

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("escapes: label values escape backslash, quote and newline; help text backslash and newline") {
  CHECK(escapeLabelValue(R"(a\b"c)" "\nd") == R"(a\\b\"c\nd)");
  CHECK(escapeHelp(R"(a\b"c)" "\nd") == R"(a\\b"c\nd)");
}

TEST_CASE("values: integers whole, fractions round-trip, NaN and infinities spelled as the format says") {
  CHECK(formatSampleValue(0) == "0");
  CHECK(formatSampleValue(123456789012345.0) == "123456789012345");
  CHECK(std::stod(formatSampleValue(0.1)) == 0.1);
  CHECK(formatSampleValue(std::nan("")) == "NaN");
  CHECK(formatSampleValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(formatSampleValue(-std::numeric_limits<double>::infinity()) == "-Inf");
}

TEST_CASE("one HELP and one TYPE line per metric, samples grouped under it in the order added") {
  PrometheusText t;
  t.add("zrt_a", "first \\ metric\nsecond line", MetricType::Gauge, {{"rank", "0"}}, 1.5);
  t.add("zrt_b_total", "a counter", MetricType::Counter, {}, 7);
  t.add("zrt_a", "first \\ metric\nsecond line", MetricType::Gauge, {{"rank", "1"}, {"tag", "say \"hi\""}}, 2);
  CHECK(t.str() ==
        "# HELP zrt_a first \\\\ metric\\nsecond line\n"
        "# TYPE zrt_a gauge\n"
        "zrt_a{rank=\"0\"} 1.5\n"
        "zrt_a{rank=\"1\",tag=\"say \\\"hi\\\"\"} 2\n"
        "# HELP zrt_b_total a counter\n"
        "# TYPE zrt_b_total counter\n"
        "zrt_b_total 7\n");
}

TEST_CASE("bad names and a type change are refused, naming the metric") {
  PrometheusText t;
  CHECK_THROWS_AS(t.add("1bad", "", MetricType::Gauge, {}, 0), InvalidArgument);
  CHECK_THROWS_AS(t.add("zrt-bad", "", MetricType::Gauge, {}, 0), InvalidArgument);
  CHECK_THROWS_AS(t.add("zrt_x", "", MetricType::Gauge, {{"bad:label", "v"}}, 0), InvalidArgument);
  t.add("zrt_x", "", MetricType::Gauge, {}, 0);
  CHECK_THROWS_WITH_AS(t.add("zrt_x", "", MetricType::Counter, {}, 0), doctest::Contains("zrt_x"), InvalidArgument);
}

TEST_CASE("the report of two ranks: every metric once, a sample per rank, the ledger's tags as labels") {
  RankMetrics a, b;
  a.steps = 3;
  a.loss = 2.5;
  b.steps = 3;
  b.loss = 2.25;
  a.ledgerBytes[static_cast<std::size_t>(MemTag::GatheredParameters)][static_cast<std::size_t>(MemPlace::Device)] = 4096;
  b.collectiveCalls[0] = 2;
  b.collectiveBytes[0] = 1 << 20;
  const std::string text = renderMetrics({a, b});
  CHECK(count(text, "# TYPE zrt_loss gauge\n") == 1);
  CHECK(count(text, "# HELP zrt_memory_bytes ") == 1);
  CHECK(count(text, "\nzrt_steps_total{rank=\"0\"} 3\n") == 1);
  CHECK(count(text, "\nzrt_loss{rank=\"1\"} 2.25\n") == 1);
  CHECK(count(text, "zrt_memory_bytes{rank=\"0\",tag=\"parameters, gathered\",place=\"device\"} 4096\n") == 1);
  CHECK(count(text, "zrt_memory_bytes{rank=") == 2 * kNumMemTags * kNumMemPlaces);
  // Only rank 1 ran a collective; a kind that never ran has no line.
  CHECK(count(text, "zrt_collective_bytes_total{rank=\"1\",op=\"allReduce\"} 1048576\n") == 1);
  CHECK(count(text, "zrt_collective_bytes_total{rank=\"0\"") == 0);
}

TEST_CASE("busbw, the oldest wait and the NVMe engine's figures, computed by hand for four ranks") {
  std::vector<RankMetrics> ranks(4);
  // All-gather on four ranks: 3e9 bytes in 2 s is algbw 1.5 GB/s, busbw 1.5 x 3/4 = 1.125.
  const auto ag = static_cast<std::size_t>(comm::OpKind::AllGather);
  ranks[0].collectiveCalls[ag] = 3;
  ranks[0].collectiveBytes[ag] = 3e9;
  ranks[0].collectiveSeconds[ag] = 2;
  // All-reduce: 1e9 bytes in 1 s, busbw 1 x 2 x 3/4 = 1.5.
  const auto ar = static_cast<std::size_t>(comm::OpKind::AllReduce);
  ranks[1].collectiveCalls[ar] = 1;
  ranks[1].collectiveBytes[ar] = 1e9;
  ranks[1].collectiveSeconds[ar] = 1;

  // Of two lanes' operations the one that has run longer is kept; nothing running changes nothing.
  noteInFlight({true, comm::OpKind::AllReduce, 0.25}, ranks[2]);
  noteInFlight({true, comm::OpKind::AllGather, 1.5}, ranks[2]);
  noteInFlight({true, comm::OpKind::Broadcast, 0.5}, ranks[2]);
  noteInFlight({}, ranks[2]);
  CHECK(ranks[2].commOldestOp == static_cast<double>(static_cast<int>(comm::OpKind::AllGather)));

  offload::EngineStats io;
  io.bytesRead = 3'000'000'000;
  io.bytesWritten = 500'000'000;
  io.queueCapacity = 16;
  io.transfersInFlight = 5;
  io.maxTransfersInFlight = 12;
  io.requestsOutstanding = 2;
  io.oldestRequestSeconds = 0.75;
  io.oldestRequestDir = offload::IoDir::Write;
  RankMetrics previous;
  previous.ioBytesRead = 1e9;
  readIoStats(io, previous, 2.0, ranks[3]);
  CHECK(ranks[3].ioReadGBps == doctest::Approx(1.0));    // (3e9 - 1e9) / 2 s
  CHECK(ranks[3].ioWriteGBps == doctest::Approx(0.25));  // 5e8 / 2 s
  io.requestsOutstanding = 0;  // nothing outstanding: op none, 0 s, whatever the other fields say
  RankMetrics idle;
  readIoStats(io, previous, 0, idle);
  CHECK(idle.ioOldestDir == -1);
  CHECK(idle.ioOldestSeconds == 0);
  CHECK(idle.ioReadGBps == 0);

  const std::string text = renderMetrics(ranks);
  CHECK(count(text, "# TYPE zrt_collective_busbw_gbps gauge\n") == 1);
  CHECK(count(text, "zrt_collective_busbw_gbps{rank=\"0\",op=\"allGather\"} 1.125\n") == 1);
  CHECK(count(text, "zrt_collective_busbw_gbps{rank=\"1\",op=\"allReduce\"} 1.5\n") == 1);
  CHECK(count(text, "# TYPE zrt_oldest_wait_seconds gauge\n") == 1);
  CHECK(count(text, "zrt_oldest_wait_seconds{rank=\"0\",source=\"comm\",op=\"none\"} 0\n") == 1);
  CHECK(count(text, "zrt_oldest_wait_seconds{rank=\"2\",source=\"comm\",op=\"allGather\"} 1.5\n") == 1);
  CHECK(count(text, "zrt_oldest_wait_seconds{rank=\"3\",source=\"io\",op=\"write\"} 0.75\n") == 1);
  // Only rank 3 has an NVMe engine: only it has io lines.
  CHECK(count(text, "zrt_io_bytes_total{rank=\"3\",dir=\"read\"} 3000000000\n") == 1);
  CHECK(count(text, "zrt_io_bytes_total{rank=\"3\",dir=\"write\"} 500000000\n") == 1);
  CHECK(count(text, "zrt_io_gbps{rank=\"3\",dir=\"read\"} 1\n") == 1);
  CHECK(count(text, "zrt_io_queue_capacity{rank=\"3\"} 16\n") == 1);
  CHECK(count(text, "zrt_io_transfers_in_flight{rank=\"3\"} 5\n") == 1);
  CHECK(count(text, "zrt_io_transfers_in_flight_max{rank=\"3\"} 12\n") == 1);
  CHECK(count(text, "zrt_io_requests_outstanding{rank=\"3\"} 2\n") == 1);
  CHECK(count(text, "zrt_io_bytes_total{rank=\"0\"") == 0);
  CHECK(count(text, "source=\"io\"") == 1);
}
