// The Prometheus text format (runtime/metrics/prometheus_text.h) against the exposition format's
// rules written out by hand: escapes, one HELP and TYPE per metric, value spelling; and the
// per-step report's rendering (metrics_report.h) of two ranks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

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
