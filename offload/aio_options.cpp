#include "offload/aio_options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "offload/fault_injecting_engine.h"

namespace zrt::offload {

std::string_view nameOf(EngineKind kind) {
  switch (kind) {
    case EngineKind::Auto: return "auto";
    case EngineKind::IoUring: return "io_uring";
    case EngineKind::ThreadPool: return "threads";
    case EngineKind::Null: return "null";
  }
  return "?";
}

std::string_view nameOf(DirectIo mode) {
  switch (mode) {
    case DirectIo::Auto: return "auto";
    case DirectIo::On: return "on";
    case DirectIo::Off: return "off";
  }
  return "?";
}

EngineKind parseEngineKind(std::string_view text) {
  if (text == "auto") return EngineKind::Auto;
  if (text == "io_uring" || text == "uring") return EngineKind::IoUring;
  if (text == "threads" || text == "thread_pool") return EngineKind::ThreadPool;
  if (text == "null") return EngineKind::Null;
  ZRT_THROW(InvalidArgument, "unknown I/O engine '", text,
            "': expected auto, io_uring, threads or null");
}

DirectIo parseDirectIo(std::string_view text) {
  if (text == "auto") return DirectIo::Auto;
  if (text == "on" || text == "1" || text == "true") return DirectIo::On;
  if (text == "off" || text == "0" || text == "false") return DirectIo::Off;
  ZRT_THROW(InvalidArgument, "unknown direct I/O mode '", text, "': expected auto, on or off");
}

AioOptions aioOptionsFrom(const AioConfig& config) {
  AioOptions o;
  if (config.block_size <= 0)
    ZRT_THROW(InvalidArgument, "aio.block_size must be positive, got ", config.block_size);
  o.block_size = static_cast<std::uint64_t>(config.block_size);
  o.queue_depth = config.queue_depth;
  o.intra_op_parallelism = config.intra_op_parallelism;
  o.single_submit = config.single_submit;
  o.overlap_events = config.overlap_events;
  if (config.use_gds) {
    warnOnce("aio.use_gds",
             "aio.use_gds is set, but ZRT has no GPUDirect Storage path: NVMe traffic goes "
             "through pinned host buffers with io_uring");
  }
  // Read once per process, like NCCL's tunables, and logged so a run says what it used.
  static const char* engineEnv = std::getenv("ZRT_AIO_ENGINE");
  static const char* directEnv = std::getenv("ZRT_AIO_DIRECT");
  if (engineEnv && *engineEnv) {
    o.engine = parseEngineKind(engineEnv);
    ZRT_INFO("ZRT_AIO_ENGINE=", engineEnv, ": I/O engine ", nameOf(o.engine));
  }
  if (directEnv && *directEnv) {
    o.direct = parseDirectIo(directEnv);
    ZRT_INFO("ZRT_AIO_DIRECT=", directEnv, ": direct I/O ", nameOf(o.direct));
  }
  // Read on every call (a test sets it for one engine): fail one transfer of ring 0 with EIO,
  // the n-th of all ("<n>") or of the reads only ("read:<n>"), counted from 0.
  if (const char* fault = std::getenv("ZRT_AIO_FAULT"); fault && *fault) {
    const bool readsOnly = std::strncmp(fault, "read:", 5) == 0;
    const char* number = readsOnly ? fault + 5 : fault;
    char* end = nullptr;
    const unsigned long long at = std::strtoull(number, &end, 10);
    if (end == number || *end != '\0')
      ZRT_THROW(InvalidArgument, "ZRT_AIO_FAULT must be a transfer number or read:<number>, got '", fault, "'");
    ZRT_WARN("ZRT_AIO_FAULT=", fault, ": ", readsOnly ? "read" : "transfer", " ", at,
             " of ring 0 will fail with EIO (a test hook)");
    o.wrap_engine = [at, readsOnly](std::unique_ptr<IoEngine> engine, int ring) -> std::unique_ptr<IoEngine> {
      if (ring != 0) return engine;
      auto reads = std::make_shared<std::uint64_t>(0);
      return std::make_unique<FaultInjectingEngine>(
          std::move(engine), [at, readsOnly, reads](const IoUnit& unit, std::uint64_t seq) -> std::optional<Fault> {
            if (readsOnly) {
              if (unit.dir != IoDir::Read) return std::nullopt;
              seq = (*reads)++;
            }
            if (seq == at) return Fault::fail(EIO);
            return std::nullopt;
          });
    };
  }
  validate(o);
  return o;
}

void validate(const AioOptions& o) {
  // 32-bit transfer lengths in io_uring entries; 1 GiB keeps well clear of them.
  constexpr std::uint64_t kMaxBlock = 1ull << 30;
  if (o.block_size < 512 || o.block_size > kMaxBlock || o.block_size % 512 != 0)
    ZRT_THROW(InvalidArgument, "aio.block_size ", o.block_size,
              " must be a multiple of 512 between 512 and ", kMaxBlock, " bytes");
  // The same ranges the config parser accepts (docs/config.md); 32768 is io_uring's largest ring.
  if (o.queue_depth < 1 || o.queue_depth > 32768)
    ZRT_THROW(InvalidArgument, "aio.queue_depth ", o.queue_depth, " must be in [1, 32768]");
  if (o.intra_op_parallelism < 1 || o.intra_op_parallelism > 1024)
    ZRT_THROW(InvalidArgument, "aio.intra_op_parallelism ", o.intra_op_parallelism,
              " must be in [1, 1024]");
}

}  // namespace zrt::offload
