#include "core/wait.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace zrt {

std::chrono::milliseconds defaultWaitTimeout() {
  static const std::chrono::milliseconds timeout = [] {
    const char* env = std::getenv("ZRT_WAIT_TIMEOUT_S");
    if (!env || !*env) return std::chrono::milliseconds(600'000);
    char* end = nullptr;
    double s = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(s > 0))
      ZRT_THROW(InvalidArgument, "environment ZRT_WAIT_TIMEOUT_S='", env,
                "' is not a positive number of seconds");
    return std::chrono::milliseconds(static_cast<long long>(s * 1000));
  }();
  return timeout;
}

}  // namespace zrt
