#include "runtime/collective_failure.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "comm/string_gather.h"

namespace zrt {
namespace {

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t nl = s.find('\n', at);
    lines.push_back(s.substr(at, nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return lines;
}

// failureOf's mark: a byte no message starts with, then the class's letter.
constexpr char kMark = '\x01';

char classLetter(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e)) return 'I';
  if (dynamic_cast<const IoError*>(&e)) return 'O';
  if (dynamic_cast<const TimeoutError*>(&e)) return 'T';
  if (dynamic_cast<const OutOfMemory*>(&e)) return 'M';
  if (dynamic_cast<const ExternalError*>(&e)) return 'X';
  if (dynamic_cast<const PeerError*>(&e)) return 'P';
  return 0;
}

}  // namespace

std::string_view failureText(std::string_view text) {
  if (text.size() >= 2 && text[0] == kMark) text.remove_prefix(2);
  return text;
}

std::string failureOf(const std::exception& e) {
  const char letter = classLetter(e);
  std::string out;
  if (letter) out = {kMark, letter};
  return out + e.what();
}

bool throwAsMarkedClass(const std::vector<std::string>& all, const std::string& text, const char* file, int line) {
  for (const std::string& f : all) {
    if (f.empty()) continue;
    if (f.size() < 2 || f[0] != kMark) return false;
    const std::string message = detail::where(file, line) + text;
    switch (f[1]) {
      case 'I': throw InvalidArgument(message);
      case 'O': throw IoError(message);
      case 'T': throw TimeoutError(message);
      case 'M': throw OutOfMemory(message);
      case 'X': throw ExternalError(message);
      case 'P': throw PeerError(message);
      default: return false;
    }
  }
  return false;
}

std::vector<std::string> gatherFailures(comm::Communicator& comm, const std::string& mine) {
  std::vector<std::string> all = comm::allGatherStrings(comm, mine);
  all[static_cast<std::size_t>(comm.rank())] = mine;  // heard even through a silent backend
  return all;
}

std::string describeFailures(const std::vector<std::string>& all) {
  std::string report;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const std::string name = "rank " + std::to_string(r);
    std::string_view text = failureText(all[r]);
    if (text.starts_with("[" + name + "] ")) text.remove_prefix(name.size() + 3);
    report += "\n  " + name + ": ";
    report += text;
  }
  return report;
}

void checkSameRegistration(comm::Communicator& comm, const EngineModel& model) {
  std::string mine;
  for (const std::string& line : describeParams(model)) mine += line + "\n";
  const std::vector<std::string> all = comm::allGatherStrings(comm, mine);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; })) return;
  std::vector<std::vector<std::string>> lines;
  std::size_t most = 0;
  for (const std::string& s : all) {
    lines.push_back(splitLines(s));
    most = std::max(most, lines.back().size());
  }
  for (std::size_t i = 0; i < most; ++i) {
    std::map<std::string, std::string> ranksBy;  // what was registered -> which ranks
    for (std::size_t r = 0; r < lines.size(); ++r) {
      const std::string what = i < lines[r].size() ? "'" + lines[r][i] + "'" : "nothing (" +
                               std::to_string(lines[r].size()) + " parameters in all)";
      std::string& ranks = ranksBy[what];
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
    if (ranksBy.size() == 1) continue;
    std::string detail;
    for (const auto& [what, ranks] : ranksBy) detail += "\n  rank(s) " + ranks + ": " + what;
    comm::markAgreedFailure();
    ZRT_THROW(InvalidArgument, "engine: ranks registered different models; first difference at "
              "parameter #", i, ":", detail);
  }
}

}  // namespace zrt
