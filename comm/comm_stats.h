// Statistics per collective kind: calls, bytes (nccl-tests' size: the full buffer), seconds spent
// running (from the start of the operation on its backend to its completion, queueing excluded),
// and algbw / busbw with the nccl-tests definitions: algbw = bytes / seconds,
// busbw = algbw * 2(n-1)/n for all-reduce and * (n-1)/n for reduce-scatter and all-gather.
// Thread-safety: record() and the readers may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "comm/collective.h"

namespace zrt::comm {

struct OpStats {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
  double seconds = 0.0;

  // GB/s (1e9 bytes per second), 0 when nothing was timed.
  double algbwGBps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

double busbwGBps(const OpStats& s, OpKind kind, int worldSize);

class CommStats {
 public:
  explicit CommStats(int worldSize = 1) : worldSize_(worldSize) {}

  void record(OpKind kind, std::uint64_t bytes, double seconds);
  OpStats get(OpKind kind) const;
  void reset();
  int worldSize() const { return worldSize_; }

  // One row per kind that ran: calls, bytes, time, algbw, busbw.
  std::string table() const;
  // {"allReduce": {"calls":..,"bytes":..,"seconds":..,"algbw_gbps":..,"busbw_gbps":..}, ...}
  nlohmann::json toJson() const;

 private:
  int worldSize_;
  mutable std::mutex mu_;
  std::array<OpStats, kNumOpKinds> ops_{};
};

}  // namespace zrt::comm
