#include "tools/ladder/ladder_result.h"

namespace zrt::ladder {

double RungResult::tokensPerSecond(const LadderSpec& spec) const {
  const double s = stepSeconds();
  if (!(s > 0)) return 0;
  return static_cast<double>(rung.globalBatch(spec.ranks)) * spec.model.seqLen / s;
}

bool LadderResult::allAgree() const {
  for (const RungResult& r : rungs)
    if (r.ran() && !r.agreement.ok()) return false;
  return true;
}

bool LadderResult::allRan() const {
  for (const RungResult& r : rungs)
    if (r.status == RungStatus::Failed) return false;
  return true;
}

}  // namespace zrt::ladder
