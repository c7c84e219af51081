// zrt-plan's command line (docs/plan.md lists the flags). runPlan() is main() without the
// process: tests call it with arguments and streams. Exit codes: 0 done, 1 nothing fits when a
// config was asked for, or the config would not load (it is loaded before it is written), or a
// file could not be written, 2 bad input (the message names the flag).
// Thread-safety: reentrant; it touches no global state besides the files it is told to write.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace zrt::plan {

int runPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace zrt::plan
