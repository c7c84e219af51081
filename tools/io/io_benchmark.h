// The measurements behind zrt-io. A Workspace owns the test files (in a private swap directory
// under --path, removed at exit or on Ctrl-C) and runs one configuration at a time:
//  - sequential streams (read, write, or both at once) over the files, keeping enough requests
//    outstanding that every ring stays full, the way fio keeps iodepth transfers in flight;
//  - the swap pattern of an offloaded optimizer step: several ranks (threads, each with its own
//    engine, as separate processes would have) walk their parameter, exp_avg and exp_avg_sq
//    files tile by tile, reading tile t while writing back tile t-1.
// Timing covers the first submission to the last completion; file layout is not timed.
// Thread-safety: one run at a time per Workspace.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_options.h"
#include "offload/swap_space.h"
#include "core/device.h"
#include "core/memory_ledger.h"

namespace zrt::iotool {

enum class Mode { Read, Write, ReadWrite, Swap };
std::string_view nameOf(Mode mode);
Mode parseMode(std::string_view text);  // read, write, rw; InvalidArgument else

// One point of a sweep.
struct RunConfig {
  Mode mode = Mode::Read;
  std::uint64_t blockSize = 1 << 20;
  int queueDepth = 8;
  int threads = 1;  // intra_op_parallelism
  bool singleSubmit = false;
  bool fixedBuffers = true;
  bool buffered = false;
  offload::EngineKind engine = offload::EngineKind::Auto;
};

// What every run of one zrt-io invocation shares.
struct Workload {
  std::vector<std::filesystem::path> paths;  // several: each file is striped over them
  // Instead of private files under `paths`: these files (like fio's --filename), created and
  // laid out when missing or shorter than fileSize, used as they are otherwise, and kept.
  std::vector<std::filesystem::path> namedFiles;
  std::uint64_t fileSize = 1ull << 30;
  int files = 1;
  double duration = 0;         // seconds; 0: move `bytes` instead
  std::uint64_t bytes = 0;     // per run; 0: every file once (swap pattern: one step)
  // 0: a quarter of block_size x queue_depth x threads in whole blocks, at most 256 MiB.
  // Enough requests are kept outstanding that one more is always queued behind what the
  // rings hold (planRequests).
  std::uint64_t requestSize = 0;
  int requests = 0;  // requests kept outstanding; 0: as planRequests says
  std::uint64_t stripeUnit = 1 << 20;
  bool verify = false;
  bool hugePages = true;  // pinned buffers in transparent huge pages where the kernel can
  bool swapPattern = false;
  int ranks = 4;
  std::uint64_t tileSize = 16 << 20;
  bool quiet = false;  // no layout messages
};

struct RunResult {
  RunConfig config;
  std::string engine;  // the engine's own description after fallbacks
  int files = 1;
  int ranks = 0;       // swap pattern only
  std::uint64_t fileSize = 0;
  std::uint64_t bytes = 0;
  std::uint64_t readBytes = 0;
  std::uint64_t writeBytes = 0;
  std::uint64_t transfers = 0;
  double seconds = 0;
  double gbps = 0;      // GB = 1e9 bytes
  double readGbps = 0;
  double writeGbps = 0;
  double iops = 0;      // transfers per second
  double p50us = 0;     // per-transfer latency percentiles
  double p99us = 0;
  // Transfers in flight on average over the run (mean latency x transfers per second): the
  // depth the drive really saw; queue_depth x threads when the rings never ran dry.
  double meanInFlight = 0;
  double stepP50ms = 0;  // swap pattern: time per tile step
  double stepP99ms = 0;
  std::uint64_t verifiedBytes = 0;
  std::uint64_t verifyErrors = 0;
  std::string firstVerifyError;
};

class Workspace {
 public:
  explicit Workspace(Workload workload);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // `progress` (may be empty) hears the fraction of the run's bytes or time done, from one
  // thread at a time, after each request (a tile step in the swap pattern).
  RunResult run(const RunConfig& config, const std::function<void(double)>& progress = {});
  const Workload& workload() const { return workload_; }

 private:
  struct File {
    std::uint32_t id;  // pattern seed
    std::shared_ptr<offload::OffloadFile> file;
    std::uint64_t size;
    bool needsLayout = true;
    offload::SwapFile swap;  // private files: removes them at the end
  };
  void layout();
  std::shared_ptr<offload::OffloadFile> reopen(const File& f, const RunConfig& c) const;
  RunResult runSequential(const RunConfig& c, const std::function<void(double)>& progress);
  RunResult runSwap(const RunConfig& c, const std::function<void(double)>& progress);

  Workload workload_;
  MemoryLedger ledger_{"zrt-io"};
  std::unique_ptr<Device> device_;
  std::unique_ptr<offload::SwapSpace> space_;
  std::vector<File> files_;
};

}  // namespace zrt::iotool
