#include "core/log.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace zrt {

LogLevel logLevel() {
  static const LogLevel level = [] {
    const char* env = std::getenv("ZRT_LOG_LEVEL");
    std::string v = env ? env : "warn";
    if (v == "error") return LogLevel::Error;
    if (v == "info") return LogLevel::Info;
    if (v == "debug") return LogLevel::Debug;
    return LogLevel::Warn;
  }();
  return level;
}

void logLine(LogLevel level, std::string_view message) {
  if (level > logLevel()) return;
  static const char* names[] = {"error", "warning", "info", "debug"};
  std::string line = "[zrt";
  if (int rank = processRank(); rank >= 0) line += detail::cat(" rank ", rank);
  line += detail::cat("] ", names[static_cast<int>(level)], ": ", message, "\n");
  // One write() per line keeps lines from different threads and ranks whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void warnOnce(std::string_view key, std::string_view message) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> seen;
  {
    std::lock_guard lock(mu);
    if (!seen.emplace(key).second) return;
  }
  logWarning(message);
}

}  // namespace zrt
