// AioOptions: how the offload engine does I/O. The first five fields are DeepSpeed's `aio`
// config section (zrt::AioConfig); the rest are ZRT's own switches: which I/O engine, O_DIRECT
// or buffered, registered buffers, and a test hook that wraps each ring's engine.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "offload/io_engine.h"

namespace zrt {
struct AioConfig;
}

namespace zrt::offload {

enum class EngineKind {
  Auto,        // io_uring; the thread pool (one warning) where the kernel refuses io_uring
  IoUring,     // io_uring or an error
  ThreadPool,  // pread/pwrite on a thread pool
  Null,        // no I/O at all (framework tests and overhead measurements)
};

enum class DirectIo {
  Auto,  // O_DIRECT; buffered (one warning) on file systems that refuse it
  On,    // O_DIRECT or an error
  Off,   // buffered I/O through the page cache
};

struct AioOptions {
  std::uint64_t block_size = 1 << 20;  // bytes per transfer; requests are split into these
  int queue_depth = 8;                 // transfers in flight per ring
  int intra_op_parallelism = 1;        // rings (each with its own thread) sharing each request
  bool single_submit = false;          // submit each transfer on its own instead of in batches
  bool overlap_events = true;          // accepted for DeepSpeed configs; ZRT always overlaps

  EngineKind engine = EngineKind::Auto;
  DirectIo direct = DirectIo::Auto;
  bool fixed_buffers = true;  // register the buffers given to the engine with each ring

  // Test hook: wraps the engine of ring `ring` (a FaultInjectingEngine, say). Empty: none.
  std::function<std::unique_ptr<IoEngine>(std::unique_ptr<IoEngine> engine, int ring)>
      wrap_engine;
};

// From the config's `aio` section. Environment overrides, read once and logged at info level:
// ZRT_AIO_ENGINE=auto|io_uring|threads|null and ZRT_AIO_DIRECT=auto|on|off. use_gds is not
// supported and warns once. A test hook, read on every call: ZRT_AIO_FAULT=<n> fails transfer
// n (counted from 0) of the engine's first ring with EIO.
AioOptions aioOptionsFrom(const AioConfig& config);

// Throws InvalidArgument naming the option and the accepted range.
void validate(const AioOptions& options);

std::string_view nameOf(EngineKind kind);
std::string_view nameOf(DirectIo mode);
// "auto", "io_uring" (or "uring"), "threads" (or "thread_pool"), "null"; InvalidArgument else.
EngineKind parseEngineKind(std::string_view text);
// "auto", "on", "off"; InvalidArgument else.
DirectIo parseDirectIo(std::string_view text);

}  // namespace zrt::offload
