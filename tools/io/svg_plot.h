// --plot: throughput against block size, one line per queue depth (and thread count), one panel
// per mode, as a self-contained SVG file. Thread-safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "io_benchmark.h"

namespace zrt::iotool {

std::string plotSvg(const std::vector<RunResult>& results);

}  // namespace zrt::iotool
