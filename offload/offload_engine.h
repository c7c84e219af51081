// OffloadEngine: the asynchronous NVMe I/O engine. read()/write() take any aligned buffer and
// a file offset and return an IoHandle at once; many requests may be outstanding. Each request
// is split into transfers of at most block_size (rounded up to the file's logical block size
// under O_DIRECT; cut at stripe boundaries too), and
// intra_op_parallelism rings, each a thread driving its own IoEngine with up to queue_depth
// transfers in flight, take transfers from the oldest request first, so one large request is
// shared by all rings and drives. Short transfers are resubmitted for the rest; a failed
// transfer fails its request with the file, offset, length and errno text.
// The model is NCCL's accept / plan / progress: read() and write() only check arguments and
// append the request; the ring threads split (plan) and progress it.
// Thread-safety: every public method may be called from any thread. Completion callbacks run
// on a ring thread: keep them short and never wait on the engine inside them.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_options.h"
#include "offload/io_request.h"
#include "offload/latency_histogram.h"
#include "offload/offload_file.h"
#include "core/wait.h"

namespace zrt::offload {

struct EngineStats {
  std::uint64_t requests = 0;        // requests finished either way (empty ones not counted)
  std::uint64_t transfers = 0;       // transfers finished successfully
  std::uint64_t bytesRead = 0;       // caller bytes, tail padding not counted
  std::uint64_t bytesWritten = 0;
  std::uint64_t shortResubmits = 0;  // short transfers sent again for the rest
  std::uint64_t retries = 0;         // EAGAIN/EINTR answers sent again
  std::uint64_t failures = 0;        // transfers that failed their request
  LatencyHistogram latency;          // per transfer, from first queue to final completion
  // The queue depth in use (all rings together) and the oldest wait, read when stats() is called;
  // resetStats() restarts the maximum from the transfers in flight then.
  std::uint64_t queueCapacity = 0;         // rings x queue_depth: the most transfers possible
  std::uint64_t transfersInFlight = 0;     // handed to the rings' engines, not yet finished
  std::uint64_t maxTransfersInFlight = 0;  // the most at once
  std::uint64_t requestsOutstanding = 0;   // accepted, not yet finished
  double oldestRequestSeconds = 0;         // how long the oldest outstanding request has waited
  IoDir oldestRequestDir = IoDir::Read;    // and what it is (meaningful when one is outstanding)
};

using CompletionCallback = std::function<void(std::exception_ptr error)>;

class OffloadEngine {
 public:
  // Starts the rings. `fixedBuffers` (pinned staging buffers, say) are registered with each
  // io_uring ring when options.fixed_buffers is on; transfers inside them use fixed-buffer
  // I/O. Registration the kernel refuses is warned about once and skipped.
  explicit OffloadEngine(AioOptions options, std::vector<iovec> fixedBuffers = {});
  // Finishes every request already accepted, then stops the rings.
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  // Open options matching this engine: its direct-I/O mode, stripe unit = block_size.
  FileOpenOptions fileOptions() const;
  std::shared_ptr<OffloadFile> open(const std::vector<std::filesystem::path>& stripes,
                                    FileOpenOptions options) const;

  // Under O_DIRECT, `buf` and `offset` must be multiples of file->alignment(); `len` may be
  // anything (the engine pads the last block internally and never touches bytes of `buf`
  // past `len`). A write whose length is not a multiple of the alignment zero-fills the rest
  // of its last block in the file. The buffer must stay valid until the request finishes.
  IoHandle read(std::shared_ptr<OffloadFile> file, std::uint64_t offset, void* buf,
                std::size_t len, CompletionCallback onComplete = {});
  IoHandle write(std::shared_ptr<OffloadFile> file, std::uint64_t offset, const void* buf,
                 std::size_t len, CompletionCallback onComplete = {});

  // Synchronous conveniences: submit and wait.
  void readSync(std::shared_ptr<OffloadFile> file, std::uint64_t offset, void* buf,
                std::size_t len, std::chrono::milliseconds timeout = defaultWaitTimeout());
  void writeSync(std::shared_ptr<OffloadFile> file, std::uint64_t offset, const void* buf,
                 std::size_t len, std::chrono::milliseconds timeout = defaultWaitTimeout());

  const AioOptions& options() const;
  // The engine in use after fallbacks: IoUring, ThreadPool or Null.
  EngineKind kind() const;
  bool fixedBuffersActive() const;
  // "io_uring: 2 rings x queue depth 8, block 1.00 MiB, batched submission, fixed buffers".
  std::string describe() const;

  EngineStats stats() const;
  void resetStats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zrt::offload
