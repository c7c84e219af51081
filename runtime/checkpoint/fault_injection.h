// Fault injection for the save protocol's tests: the save calls faultPoint() before each step
// that changes the disk (create, write, fsync, rename), and writes ask injectNoSpace() before
// each write. A plan set here (or, when none is, read once from ZRT_CHECKPOINT_FAULT: "kill:K"
// or "enospc:K") makes the K-th point (1-based, counted over the process's life) SIGKILL the
// process, or the K-th write fail with ENOSPC. Without a plan both are one relaxed load.
// Thread-safety: the counters are atomic; set the plan before saving.
#pragma once

#include <cstdint>

namespace zrt::checkpoint {

enum class FaultKind { None, Kill, NoSpace };

struct FaultPlan {
  FaultKind kind = FaultKind::None;
  std::int64_t at = 0;  // 1-based point (Kill) or write (NoSpace)
};

// Replaces the environment's plan and restarts the counts.
void setFaultPlanForTesting(FaultPlan plan);
// Points counted so far (a test learns how many points one save has).
std::int64_t faultPointsSoFar();

void faultPoint();
bool injectNoSpace();

}  // namespace zrt::checkpoint
