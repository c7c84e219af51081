// ZRT_THROW_ERRNO(err, ...): throws zrt::IoError carrying `err` (so callers can tell ENOSPC from
// EIO) with "[rank R] file:line: " and the streamed message, which should name the file, the
// offset and length, and end with strerror(err).
#pragma once

#include "core/error.h"

#define ZRT_THROW_ERRNO(err, ...)                                                        \
  throw ::zrt::IoError(::zrt::detail::where(__FILE__, __LINE__) +                        \
                           ::zrt::detail::cat(__VA_ARGS__),                              \
                       (err))
