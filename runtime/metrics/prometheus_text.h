// Prometheus' text exposition format (version 0.0.4): samples are added in any order and the
// text groups them by metric, with one # HELP and one # TYPE line per metric, label values and
// help text escaped as the format requires (backslash, double quote in labels, newline).
// Thread-safety: plain data; one thread builds a text.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zrt::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { Gauge, Counter };

class PrometheusText {
 public:
  // A metric's name must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*
  // (throws InvalidArgument otherwise). A metric added again with another type throws too.
  void add(const std::string& name, const std::string& help, MetricType type, const Labels& labels,
           double value);
  // The exposition text: metrics in the order first added, each sample on its own line.
  std::string str() const;

 private:
  struct Metric {
    std::string name, help;
    MetricType type;
    std::vector<std::string> samples;  // "{labels} value"
  };
  std::vector<Metric> metrics_;
};

// The escapes themselves, for tests: a label value escapes \ " and newline; help text \ and newline.
std::string escapeLabelValue(const std::string& s);
std::string escapeHelp(const std::string& s);
// A sample value: integers exactly, NaN and infinities as the format spells them.
std::string formatSampleValue(double v);

}  // namespace zrt::metrics
