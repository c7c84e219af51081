#include "runtime/checkpoint/fault_injection.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace zrt::checkpoint {
namespace {

std::atomic<int> gKind{static_cast<int>(FaultKind::None)};
std::atomic<std::int64_t> gAt{0};
std::atomic<std::int64_t> gPoints{0};
std::atomic<std::int64_t> gWrites{0};
std::once_flag gEnvOnce;

// "kill:K" / "enospc:K"; anything else is a mistake in a test's set-up, said loudly.
void readEnvironment() {
  const char* v = std::getenv("ZRT_CHECKPOINT_FAULT");
  if (!v || !*v) return;
  const std::string s(v);
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  char* end = nullptr;
  const long long at = colon == std::string::npos ? 0 : std::strtoll(s.c_str() + colon + 1, &end, 10);
  if (at <= 0 || !end || *end != '\0' || (kind != "kill" && kind != "enospc"))
    ZRT_THROW(InvalidArgument, "ZRT_CHECKPOINT_FAULT='", s, "' is not kill:K or enospc:K (K >= 1)");
  gAt = at;
  gKind = static_cast<int>(kind == "kill" ? FaultKind::Kill : FaultKind::NoSpace);
}

FaultKind kind() {
  std::call_once(gEnvOnce, readEnvironment);
  return static_cast<FaultKind>(gKind.load(std::memory_order_relaxed));
}

}  // namespace

void setFaultPlanForTesting(FaultPlan plan) {
  std::call_once(gEnvOnce, [] {});  // an explicit plan wins over the environment
  gAt = plan.at;
  gKind = static_cast<int>(plan.kind);
  gPoints = 0;
  gWrites = 0;
}

std::int64_t faultPointsSoFar() { return gPoints.load(); }

void faultPoint() {
  const std::int64_t n = ++gPoints;
  if (kind() == FaultKind::Kill && n == gAt.load()) ::raise(SIGKILL);
}

bool injectNoSpace() {
  const std::int64_t n = ++gWrites;
  return kind() == FaultKind::NoSpace && n == gAt.load();
}

}  // namespace zrt::checkpoint
