#include "runtime/metrics/prometheus_text.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace zrt::metrics {
namespace {

bool validName(const std::string& s, bool colonAllowed) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colonAllowed && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

std::string escapeLabelValue(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escapeHelp(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string formatSampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Byte counts are integers below 2^53: printed whole, so a scraper compares them exactly.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void PrometheusText::add(const std::string& name, const std::string& help, MetricType type, const Labels& labels,
                         double value) {
  if (!validName(name, true)) ZRT_THROW(InvalidArgument, "metric name \"", name, "\" is not a Prometheus name");
  std::string sample;
  if (!labels.empty()) {
    sample += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (!validName(labels[i].first, false))
        ZRT_THROW(InvalidArgument, "metric ", name, ": label name \"", labels[i].first, "\" is not a Prometheus name");
      if (i > 0) sample += ',';
      sample += labels[i].first + "=\"" + escapeLabelValue(labels[i].second) + '"';
    }
    sample += '}';
  }
  sample += ' ' + formatSampleValue(value);
  for (Metric& m : metrics_) {
    if (m.name != name) continue;
    if (m.type != type) ZRT_THROW(InvalidArgument, "metric ", name, " added as both a gauge and a counter");
    m.samples.push_back(std::move(sample));
    return;
  }
  metrics_.push_back({name, help, type, {std::move(sample)}});
}

std::string PrometheusText::str() const {
  std::string out;
  for (const Metric& m : metrics_) {
    out += "# HELP " + m.name + ' ' + escapeHelp(m.help) + '\n';
    out += "# TYPE " + m.name + (m.type == MetricType::Gauge ? " gauge\n" : " counter\n");
    for (const std::string& s : m.samples) out += m.name + s + '\n';
  }
  return out;
}

}  // namespace zrt::metrics
