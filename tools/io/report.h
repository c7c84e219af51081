// zrt-io's output: JSON lines and CSV for scripts, a human table (best first), a progress bar
// for sweeps, and the DeepSpeed `aio` section --tune prints. Thread-safety: pure functions,
// except ProgressBar, which writes to stderr from one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io_benchmark.h"

namespace zrt::iotool {

// Keys: mode, block_size, queue_depth, threads, bytes, seconds, gbps (GB = 1e9 bytes), and
// read_gbps, write_gbps, iops, p50_us, p99_us, mean_in_flight, files, file_size, single_submit,
// fixed_buffers, buffered, engine, verified_bytes, verify_errors (+ ranks, step_p50_ms,
// step_p99_ms for swap).
nlohmann::json toJson(const RunResult& r);

// "1M", "256K", "8M", "1536": block sizes as people write them (binary suffixes, exact only).
std::string shortBytes(std::uint64_t bytes);
std::string csvHeader();
std::string toCsv(const RunResult& r);

// Sorted best first (GB/s) within each mode; one table per mode.
std::string table(std::vector<RunResult> results);

// The setting with the best harmonic mean of read and write GB/s (an optimizer step reads and
// writes the same bytes, so its time goes with 1/read + 1/write), as {"aio": {...}}. With only
// one of read or write measured, the best of that one. Sets *summary to a human line.
nlohmann::json tuneSection(const std::vector<RunResult>& results, std::string* summary);

// Progress of the settings on stderr. `rewrite` (a terminal; --progress): one bar rewritten in
// place as each setting moves, at most ten times a second; else a plain line as each setting
// starts and one as it ends, readable in a log file.
class ProgressBar {
 public:
  ProgressBar(std::size_t total, bool rewrite);
  // Setting `index` (from 0) of the total begins.
  void start(std::size_t index, const std::string& label);
  // The current setting has done `fraction` of its bytes or time (shown only when rewriting).
  void advance(double fraction);
  // The current setting ended with `result` ("1.23 GB/s").
  void done(const std::string& result);
  // Ends the rewritten line.
  void finish();

 private:
  void draw(double fraction, const std::string& tail);

  std::size_t total_;
  bool rewrite_;
  std::size_t index_ = 0;
  std::string label_;
  std::chrono::steady_clock::time_point lastDraw_{};
};

}  // namespace zrt::iotool
