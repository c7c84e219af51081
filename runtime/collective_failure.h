// How the Engine keeps ranks in step when one of them fails: every rank hears what failed on
// any rank and all throw the same error, or none does; a rank that fails alone would leave its
// peers waiting in the next collective.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/string_gather.h"
#include "core/error.h"
#include "runtime/model_spec.h"

namespace zrt {

// `mine` empty: nothing failed here. Collective.
template <class ErrorType>
void throwIfAnyRankFailed(comm::Communicator& comm, const std::string& mine, const std::string& what) {
  std::vector<std::string> all = comm::allGatherStrings(comm, mine);
  all[static_cast<std::size_t>(comm.rank())] = mine;  // heard even through a silent backend
  std::string report;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) report += "\n  rank " + std::to_string(r) + ": " + all[r];
  if (!report.empty()) ZRT_THROW(ErrorType, what, report);
}

// Runs `f`; what it throws on any rank is thrown on every rank as ErrorType after `what`.
template <class ErrorType, class F>
void onEveryRankOrNone(comm::Communicator& comm, const std::string& what, F&& f) {
  std::string failure;
  try {
    f();
  } catch (const std::exception& ex) {
    failure = ex.what();
  }
  throwIfAnyRankFailed<ErrorType>(comm, failure, what);
}

// Throws on every rank (they all see the same descriptions) when registrations differ, naming
// the first parameter that differs and what each rank registered there. Collective.
void checkSameRegistration(comm::Communicator& comm, const EngineModel& model);

}  // namespace zrt
