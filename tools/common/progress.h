// Progress display shared by the command-line tools (zrt-train, zrt-io): whether to rewrite one
// line in place or print plain lines, and the bar. A terminal gets the line rewritten with \r and
// erase-to-end; a log file or pipe gets whole lines, which stay readable there.
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>

namespace zrt::tools {

// What --progress takes.
inline constexpr std::string_view kProgressModes[] = {"auto", "on", "off"};

// Starts a line that replaces the one the cursor is on (carriage return, erase to end of line).
inline constexpr const char* kRewriteLine = "\r\x1b[K";

// Whether to rewrite one line in place for --progress `mode`: on and off say so; auto does on a
// terminal, except under mpirun, whose relayed output is a pipe that only looks like a terminal
// when mpirun's own output is one.
inline bool rewriteProgress(std::string_view mode, bool isTerminal, bool startedByMpirun = false) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  return isTerminal && !startedByMpirun;
}

// "[#########.....................]" for `fraction` (clamped to 0..1) of `width` cells.
inline std::string progressBar(double fraction, std::size_t width = 30) {
  if (!(fraction >= 0)) fraction = 0;  // NaN too
  fraction = std::min(fraction, 1.0);
  const auto filled = std::min(width, static_cast<std::size_t>(std::floor(fraction * static_cast<double>(width))));
  // Appended piece by piece: GCC 12 at -O3 warns, wrongly, that `"[" + std::string(...)` copies
  // overlapping memory (-Wrestrict), a known false positive of its string inlining.
  std::string bar = "[";
  bar.append(filled, '#');
  bar.append(width - filled, '.');
  bar += ']';
  return bar;
}

}  // namespace zrt::tools
