#include "tools/ladder/measurement.h"

#include <algorithm>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zrt::ladder {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool isMemoryLine(const nlohmann::json& j) { return j.is_object() && j.contains("memory") && j.contains("total"); }

// {"current": N, "peak": N} -> N's peak.
std::uint64_t peakOf(const nlohmann::json& counter, const std::string& where) {
  if (!counter.is_object() || !counter.contains("peak") || !counter["peak"].is_number_unsigned())
    ZRT_THROW(InvalidArgument, "memory ledger line: ", where, " has no byte count \"peak\" (", counter.dump(), ")");
  return counter["peak"].get<std::uint64_t>();
}

const nlohmann::json& member(const nlohmann::json& object, std::string_view key, const std::string& where) {
  const auto it = object.find(std::string(key));
  if (it == object.end()) ZRT_THROW(InvalidArgument, "memory ledger line: ", where, " lacks \"", key, "\"");
  return *it;
}

}  // namespace

LedgerReading parseMemoryLine(const std::string& text) {
  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line))
    if (!trim(line).empty()) last = line;
  const nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (!isMemoryLine(j))
    ZRT_THROW(InvalidArgument, "the step log's last line is not the memory ledger (zrt-train writes it after the last "
              "step): '", last, "'");
  LedgerReading r;
  const nlohmann::json& memory = j["memory"];
  const nlohmann::json& total = j["total"];
  for (int p = 0; p < kNumMemPlaces; ++p) {
    const auto place = static_cast<MemPlace>(p);
    for (int t = 0; t < kNumMemTags; ++t) {
      const auto tag = static_cast<MemTag>(t);
      const std::string where = detail::cat("\"memory\"/\"", nameOf(tag), "\"");
      const nlohmann::json& cell = member(member(memory, nameOf(tag), "\"memory\""), nameOf(place), where);
      r.peaks.add(tag, place, peakOf(cell, detail::cat(where, "/\"", nameOf(place), "\"")));
    }
    r.placePeak[p] = peakOf(member(total, nameOf(place), "\"total\""), detail::cat("\"total\"/\"", nameOf(place), "\""));
  }
  return r;
}

double StepTimes::typicalOf(const std::vector<double>& values) {
  if (values.empty()) return 0;
  std::vector<double> s(values.size() > 1 ? values.begin() + 1 : values.begin(), values.end());
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

StepTimes parseStepLog(const std::string& text) {
  StepTimes t;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (trim(line).empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (isMemoryLine(j)) continue;
    if (!j.is_object() || !j.contains("step_s") || !j["step_s"].is_number())
      ZRT_THROW(InvalidArgument, "step log line ", number, ": expected a JSON object with step_s, got '", line, "'");
    t.seconds.push_back(j["step_s"].get<double>());
    if (j.contains("compute_s") && j["compute_s"].is_number()) t.compute.push_back(j["compute_s"].get<double>());
  }
  if (t.seconds.empty()) ZRT_THROW(InvalidArgument, "the step log has no step");
  if (!t.compute.empty() && t.compute.size() != t.seconds.size())
    ZRT_THROW(InvalidArgument, "the step log has compute_s on ", t.compute.size(), " of its ", t.seconds.size(), " steps");
  return t;
}

}  // namespace zrt::ladder
