// The thread-pool I/O engine (thread_pool_engine.cpp): the fallback for kernels or sandboxes
// without io_uring. Each committed unit runs as one pread/pwrite on a Boost.Asio thread pool of
// `depth` threads (at most 256), so that many transfers really are in flight at once.
// Thread-safety: as IoEngine (one driving thread; wake() from any thread).
#pragma once

#include <cstddef>
#include <memory>

#include "offload/io_engine.h"

namespace zrt::offload {

std::unique_ptr<IoEngine> makeThreadPoolEngine(std::size_t depth);

}  // namespace zrt::offload
