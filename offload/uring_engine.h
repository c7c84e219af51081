// The io_uring I/O engine (uring_engine.cpp): one ring per engine with `depth` units in flight
// and an eventfd read kept armed so wake() can interrupt a blocked reap. Rings are set up
// single-issuer with deferred task running where the kernel has them (6.1+): completions are
// then processed only when the owning thread waits, which is all it does. Registered (fixed)
// buffers skip pinning pages for every O_DIRECT transfer.
// Thread-safety: as IoEngine; create and drive it from one thread (single-issuer rings insist).
#pragma once

#include <cstddef>
#include <memory>

#include "offload/io_engine.h"

namespace zrt::offload {

// Throws IoError (errnum set) when the kernel refuses the ring.
std::unique_ptr<IoEngine> makeUringEngine(std::size_t depth);

// 0 when this process may use io_uring, else the errno the kernel answered (ENOSYS without the
// syscall, EPERM when disabled by sysctl or a seccomp sandbox).
int probeUring();

}  // namespace zrt::offload
