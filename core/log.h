// Minimal logging to stderr with the rank in front. The level comes from ZRT_LOG_LEVEL
// (error, warn, info, debug; default warn), read once. Thread-safe: each line is one write.
#pragma once

#include <string_view>

#include "core/error.h"

namespace zrt {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel logLevel();
void logLine(LogLevel level, std::string_view message);
inline void logError(std::string_view m) { logLine(LogLevel::Error, m); }
inline void logWarning(std::string_view m) { logLine(LogLevel::Warn, m); }
inline void logInfo(std::string_view m) { logLine(LogLevel::Info, m); }

// Logs a warning the first time `key` is seen in this process; later calls are silent. For
// fallbacks (buffered I/O instead of O_DIRECT, thread pool instead of io_uring) that would
// otherwise print once per request.
void warnOnce(std::string_view key, std::string_view message);

}  // namespace zrt

#define ZRT_WARN(...) ::zrt::logWarning(::zrt::detail::cat(__VA_ARGS__))
#define ZRT_INFO(...)                                                               \
  do {                                                                              \
    if (::zrt::logLevel() >= ::zrt::LogLevel::Info)                                 \
      ::zrt::logInfo(::zrt::detail::cat(__VA_ARGS__));                              \
  } while (0)
