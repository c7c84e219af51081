// How the Engine keeps ranks in step when one of them fails: every rank hears what failed on
// any rank and all throw the same error, or none does; a rank that fails alone would leave its
// peers waiting in the next collective.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "comm/agreed_failure.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "runtime/model_spec.h"

namespace zrt {

// Every rank's failure (empty: nothing failed there), in rank order. Collective.
std::vector<std::string> gatherFailures(comm::Communicator& comm, const std::string& mine);

// "\n  rank R: <its failure>" for each rank that failed, each rank named once: a failure that
// begins with its own "[rank R] " (every ZRT error does) loses it. Empty when none failed.
std::string describeFailures(const std::vector<std::string>& all);

// A failure as gathered: the exception's text, marked with its ZRT class (an IoError on one rank
// is an IoError on every rank, so a caller's `except IoError` works the same everywhere).
std::string failureOf(const std::exception& e);
// The text of a failure as gathered, without failureOf's mark.
std::string_view failureText(std::string_view failure);

// Throws, as the class the lowest failing rank's failureOf() marked, `text` (after file:line);
// false when no failure carries a class mark (the caller throws its own class).
bool throwAsMarkedClass(const std::vector<std::string>& all, const std::string& text, const char* file, int line);

// Throws on every rank with the same text when any rank failed, after marking the error as
// agreed (comm/agreed_failure.h: the ranks unwind together, none waits for another): of the
// class the first failing rank's failureOf() recorded, else ErrorType.
template <class ErrorType>
void throwGathered(const std::vector<std::string>& all, const std::string& what) {
  const std::string report = describeFailures(all);
  if (report.empty()) return;
  comm::markAgreedFailure();
  throwAsMarkedClass(all, what + report, __FILE__, __LINE__);
  ZRT_THROW(ErrorType, what, report);
}

// `mine` empty: nothing failed here. Collective.
template <class ErrorType>
void throwIfAnyRankFailed(comm::Communicator& comm, const std::string& mine, const std::string& what) {
  throwGathered<ErrorType>(gatherFailures(comm, mine), what);
}

// Runs `f`; what it throws on any rank is thrown on every rank after `what`, as the ZRT class
// the first failing rank threw (ErrorType for an exception that is not a ZRT error's subclass).
template <class ErrorType, class F>
void onEveryRankOrNone(comm::Communicator& comm, const std::string& what, F&& f) {
  std::string failure;
  try {
    f();
  } catch (const std::exception& ex) {
    failure = failureOf(ex);
  }
  throwIfAnyRankFailed<ErrorType>(comm, failure, what);
}

// Throws on every rank (they all see the same descriptions) when registrations differ, naming
// the first parameter that differs and what each rank registered there. Collective.
void checkSameRegistration(comm::Communicator& comm, const EngineModel& model);

}  // namespace zrt
