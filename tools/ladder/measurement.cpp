#include "tools/ladder/measurement.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zrt::ladder {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> cellsOf(std::string_view line) {
  std::vector<std::string_view> cells;
  // "| a | b | c |": the text between bars.
  std::size_t start = line.find('|');
  while (start != std::string_view::npos) {
    const std::size_t end = line.find('|', start + 1);
    if (end == std::string_view::npos) break;
    cells.push_back(trim(line.substr(start + 1, end - start - 1)));
    start = end;
  }
  return cells;
}

std::optional<MemTag> tagNamed(std::string_view name) {
  for (int t = 0; t < kNumMemTags; ++t)
    if (nameOf(static_cast<MemTag>(t)) == name) return static_cast<MemTag>(t);
  return std::nullopt;
}

// "current / peak" -> peak.
std::uint64_t peakOf(std::string_view cell, std::string_view line) {
  const std::size_t slash = cell.find(" / ");
  if (slash == std::string_view::npos)
    ZRT_THROW(InvalidArgument, "memory ledger: expected 'current / peak' in '", cell, "' of line '", line, "'");
  return parsePrintedBytes(trim(cell.substr(slash + 3)));
}

}  // namespace

std::uint64_t parsePrintedBytes(std::string_view text) {
  static constexpr std::string_view kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  const std::string s(trim(text));
  const std::size_t space = s.find(' ');
  auto bad = [&]() -> std::uint64_t {
    ZRT_THROW(InvalidArgument, "memory ledger: cannot read the size '", text, "'");
  };
  if (space == std::string::npos) return bad();
  const std::string number = s.substr(0, space), unit = s.substr(space + 1);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || errno != 0 || !std::isfinite(v) || v < 0) return bad();
  double scale = 1;
  for (std::string_view u : kUnits) {
    if (u == unit) return static_cast<std::uint64_t>(std::llround(v * scale));
    scale *= 1024;
  }
  return bad();
}

LedgerReading parseLedgerTable(const std::string& output) {
  // The table's first data row starts after its last header line ("| tag | device | ...").
  const std::size_t header = output.rfind("| tag ");
  if (header == std::string::npos)
    ZRT_THROW(InvalidArgument, "no memory ledger table in the trainer's output (it prints rank 0's at the end of a run)");
  LedgerReading r;
  bool total = false;
  std::istringstream lines(output.substr(header));
  std::string line;
  std::getline(lines, line);  // the header
  while (!total && std::getline(lines, line)) {
    if (line.starts_with("|---")) continue;
    const std::vector<std::string_view> cells = cellsOf(line);
    if (cells.size() != 1 + kNumMemPlaces)
      ZRT_THROW(InvalidArgument, "memory ledger: expected ", 1 + kNumMemPlaces, " cells in line '", line, "'");
    if (cells[0] == "total") {
      for (int p = 0; p < kNumMemPlaces; ++p) r.placePeak[p] = peakOf(cells[1 + p], line);
      total = true;
      continue;
    }
    const std::optional<MemTag> tag = tagNamed(cells[0]);
    if (!tag) ZRT_THROW(InvalidArgument, "memory ledger: unknown tag '", cells[0], "' in line '", line, "'");
    for (int p = 0; p < kNumMemPlaces; ++p)
      r.peaks.add(*tag, static_cast<MemPlace>(p), peakOf(cells[1 + p], line));
  }
  if (!total) ZRT_THROW(InvalidArgument, "memory ledger: the table has no total row");
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
