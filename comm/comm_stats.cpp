#include "comm/comm_stats.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/units.h"

namespace zrt::comm {

double busbwGBps(const OpStats& s, OpKind kind, int worldSize) {
  return s.algbwGBps() * busFactor(kind, worldSize);
}

void CommStats::record(OpKind kind, std::uint64_t bytes, double seconds) {
  std::lock_guard lock(mu_);
  OpStats& s = ops_[static_cast<int>(kind)];
  ++s.calls;
  s.bytes += bytes;
  s.seconds += seconds;
}

OpStats CommStats::get(OpKind kind) const {
  std::lock_guard lock(mu_);
  return ops_[static_cast<int>(kind)];
}

void CommStats::reset() {
  std::lock_guard lock(mu_);
  ops_ = {};
}

std::string CommStats::table() const {
  std::string out = "op              calls        bytes     time(s)  algbw(GB/s)  busbw(GB/s)\n";
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    const OpStats s = get(kind);
    if (s.calls == 0) continue;
    char line[160];
    std::snprintf(line, sizeof line, "%-14s %6llu %12s %11.4f %12.3f %12.3f\n",
                  std::string(nameOf(kind)).c_str(), static_cast<unsigned long long>(s.calls),
                  formatBytes(s.bytes).c_str(), s.seconds, s.algbwGBps(),
                  busbwGBps(s, kind, worldSize_));
    out += line;
  }
  return out;
}

nlohmann::json CommStats::toJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    const OpStats s = get(kind);
    if (s.calls == 0) continue;
    j[std::string(nameOf(kind))] = {{"calls", s.calls},
                                    {"bytes", s.bytes},
                                    {"seconds", s.seconds},
                                    {"algbw_gbps", s.algbwGBps()},
                                    {"busbw_gbps", busbwGBps(s, kind, worldSize_)}};
  }
  return j;
}

}  // namespace zrt::comm
