// ZRT_CHECK_SYS(call, context...): for system calls that return -1 and set errno. A failure
// throws IoError carrying errno, with "[rank R] file:line", the call's text, the streamed context
// (what the call was for: a peer, an address, a path) and strerror(errno); otherwise the macro
// yields the call's result. Thread-safe: it throws on the calling thread.
#pragma once

#include <cerrno>
#include <cstring>

#include "core/error.h"

#define ZRT_CHECK_SYS(call, ...)                                                  \
  ([&]() {                                                                        \
    auto zrt_sys_rc_ = (call);                                                    \
    if (zrt_sys_rc_ == -1) {                                                      \
      const int zrt_errnum_ = errno;                                              \
      throw ::zrt::IoError(::zrt::detail::where(__FILE__, __LINE__) +             \
                               "system call `" #call "` failed" __VA_OPT__(       \
                                   +::zrt::detail::cat(" (", __VA_ARGS__, ")")) + \
                               ": " + std::strerror(zrt_errnum_),                 \
                           zrt_errnum_);                                          \
    }                                                                             \
    return zrt_sys_rc_;                                                           \
  }())
