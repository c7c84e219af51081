// The default bound on any wait that could otherwise block forever (events, streams, requests,
// collectives). Read once from ZRT_WAIT_TIMEOUT_S (seconds, default 600) so a hung job says
// what it waited for instead of hanging silently.
#pragma once

#include <chrono>

namespace zrt {

std::chrono::milliseconds defaultWaitTimeout();

}  // namespace zrt
