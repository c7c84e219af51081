// Every rank's string, in rank order: how ranks tell each other what went wrong (set-up
// failures, misuse, checkpoint outcomes, registrations) so that all of them throw the same error
// instead of one rank leaving the others waiting. A one-rank world answers without
// communicating, and this rank's own entry is always its own string, so a backend that moves
// nothing (comm/null) still hears itself.
// Thread-safety: collective; one thread per rank.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zrt::comm {

std::vector<std::string> allGatherStrings(Communicator& comm, const std::string& mine);

}  // namespace zrt::comm
