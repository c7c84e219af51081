// ZRT_CHECK_URING: liburing returns -errno instead of setting errno. A negative result throws
// IoError with "[rank R] file:line", the call's text and strerror(-ret); otherwise the macro
// yields the (non-negative) result.
#pragma once

#include <cstring>

#include "core/error.h"

#define ZRT_CHECK_URING(call)                                                              \
  ([&]() {                                                                                 \
    auto zrt_uring_rc_ = (call);                                                           \
    if (zrt_uring_rc_ < 0) {                                                               \
      const int zrt_errnum_ = static_cast<int>(-zrt_uring_rc_);                            \
      throw ::zrt::IoError(::zrt::detail::where(__FILE__, __LINE__) +                      \
                               "io_uring call `" #call "` failed: " +                      \
                               std::strerror(zrt_errnum_),                                 \
                           zrt_errnum_);                                                   \
    }                                                                                      \
    return zrt_uring_rc_;                                                                  \
  }())
