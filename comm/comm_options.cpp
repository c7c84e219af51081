#include "comm/comm_options.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt::comm {

std::string_view nameOf(CommPath path) {
  switch (path) {
    case CommPath::Auto: return "auto";
    case CommPath::Mpi: return "mpi";
    case CommPath::Shm: return "shm";
  }
  return "?";
}

CommPath parseCommPath(std::string_view text) {
  if (text == "auto") return CommPath::Auto;
  if (text == "mpi") return CommPath::Mpi;
  if (text == "shm") return CommPath::Shm;
  ZRT_THROW(InvalidArgument, "unknown communication path '", text, "': expected auto, mpi or shm");
}

bool defaultCheckConsistency() {
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

double positiveSeconds(const char* name, const char* text) {
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(s > 0))
    ZRT_THROW(InvalidArgument, "environment ", name, "='", text,
              "' is not a positive number of seconds");
  return s;
}

// Whole milliseconds, at least 1 (a timeout of 0 would report every operation at once) and at
// most about 31 years (a larger double does not fit the count).
std::chrono::milliseconds toMilliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::clamp(seconds * 1000, 1.0, 1e12)));
}

}  // namespace

std::chrono::milliseconds secondsFromEnvironment(const char* name, double fallback) {
  const char* v = env(name);
  return toMilliseconds(v ? positiveSeconds(name, v) : fallback);
}

std::chrono::milliseconds nonNegativeSecondsFromEnvironment(const char* name, double fallback) {
  const char* v = env(name);
  double s = fallback;
  if (v) {
    char* end = nullptr;
    s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(s >= 0))
      ZRT_THROW(InvalidArgument, "environment ", name, "='", v,
                "' is not 0 (off) or a positive number of seconds");
  }
  return s == 0 ? std::chrono::milliseconds(0) : toMilliseconds(s);
}

CommOptions CommOptions::fromEnvironment(double timeoutSeconds) {
  CommOptions o;
  if (!(timeoutSeconds > 0))
    ZRT_THROW(InvalidArgument, "comm timeout must be positive, got ", timeoutSeconds, " s");
  o.timeout = toMilliseconds(timeoutSeconds);
  if (const char* v = env("ZRT_COMM_PATH")) {
    try {
      o.path = parseCommPath(v);
    } catch (const InvalidArgument&) {
      ZRT_THROW(InvalidArgument, "environment ZRT_COMM_PATH='", v, "': expected auto, mpi or shm");
    }
  }
  if (const char* v = env("ZRT_COMM_TIMEOUT_S"))
    o.timeout = toMilliseconds(positiveSeconds("ZRT_COMM_TIMEOUT_S", v));
  o.divergenceTimeout = nonNegativeSecondsFromEnvironment(
      "ZRT_DIVERGENCE_TIMEOUT_S", static_cast<double>(o.divergenceTimeout.count()) / 1000.0);
  if (const char* v = env("ZRT_COMM_CHECK")) {
    const std::string s(v);
    if (s != "0" && s != "1")
      ZRT_THROW(InvalidArgument, "environment ZRT_COMM_CHECK='", v, "': expected 0 or 1");
    o.checkConsistency = s == "1";
  }
  if (const char* v = env("ZRT_COMM_SHM_BYTES"))
    o.shmBytes = static_cast<std::size_t>(parseBytes(v, "ZRT_COMM_SHM_BYTES"));
  if (const char* v = env("ZRT_COMM_SHM_MIN_BYTES"))
    o.shmMinBytes = static_cast<std::size_t>(parseBytes(v, "ZRT_COMM_SHM_MIN_BYTES"));
  if (const char* v = env("ZRT_COMM_RANKS_PER_NODE")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0)
      ZRT_THROW(InvalidArgument, "environment ZRT_COMM_RANKS_PER_NODE='", v,
                "': expected a non-negative integer");
    o.simulatedRanksPerNode = static_cast<int>(n);
  }
  ZRT_INFO("comm options: path=", nameOf(o.path),
           " timeout=", static_cast<double>(o.timeout.count()) / 1000.0,
           " s check=", o.checkConsistency, " shm_bytes=", formatBytes(o.shmBytes),
           " shm_min_bytes=", formatBytes(o.shmMinBytes),
           " ranks_per_node=", o.simulatedRanksPerNode);
  return o;
}

CommOptions CommOptions::fromEnvironment() { return fromEnvironment(600.0); }

}  // namespace zrt::comm
