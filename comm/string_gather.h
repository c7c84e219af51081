// Every rank's string, in rank order: how ranks tell each other what went wrong (set-up
// failures, misuse, checkpoint outcomes, registrations) so that all of them throw the same error
// instead of one rank leaving the others waiting. A one-rank world answers without
// communicating. Through a backend that moves nothing (comm/null) every entry comes back empty:
// callers that report failures add their own (see the engine's and the checkpoints' agreements).
// Thread-safety: collective; one thread per rank.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zrt::comm {

std::vector<std::string> allGatherStrings(Communicator& comm, const std::string& mine);

}  // namespace zrt::comm
