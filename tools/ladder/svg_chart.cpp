#include "tools/ladder/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/units.h"

namespace zrt::ladder {

namespace {

// Layout in pixels: a label column, the memory panel, a gap, the step-time panel.
constexpr double kLabelW = 280, kMemW = 520, kGap = 60, kStepW = 220, kRight = 70;
constexpr double kTop = 70, kRowH = 28, kBarH = 18, kBottom = 50;
constexpr const char* kColors[kNumChartParts] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#b07aa1"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// A value in a data-* attribute: enough digits to read the double back.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += c;
    }
  }
  return o;
}

// An axis from 0 to a whole number of round steps (1, 2, 2.5 or 5 times a power of ten), about
// `ticks` of them, reaching at least `v`.
struct Axis {
  double end = 1;
  int steps = 1;
};
Axis niceAxis(double v, int ticks) {
  if (!(v > 0)) return {};
  const double target = v / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(target)));
  double step = 10 * p;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (target <= m * p * (1 + 1e-12)) {
      step = m * p;
      break;
    }
  const int steps = std::max(1, static_cast<int>(std::ceil(v / step - 1e-9)));
  return {step * steps, steps};
}

std::string seconds(double s) {
  char buf[32];
  if (s >= 10) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s >= 0.1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

// An axis label: whole milliseconds on an axis shorter than a second.
std::string tickSeconds(double s, double axisEnd) {
  if (s == 0) return "0";
  char buf[32];
  if (axisEnd < 1) std::snprintf(buf, sizeof buf, "%g ms", std::round(s * 1e4) / 10);
  else std::snprintf(buf, sizeof buf, "%g s", std::round(s * 100) / 100);
  return buf;
}

}  // namespace

std::string ladderSvg(const std::vector<ChartBar>& bars, std::uint64_t budgetBytes, const std::string& title) {
  // The memory axis in MiB, rounded up so the longest bar, tick and the budget all fit.
  double maxBytes = static_cast<double>(budgetBytes);
  double maxSeconds = 0;
  for (const ChartBar& b : bars) {
    std::uint64_t sum = 0;
    for (std::uint64_t p : b.parts) sum += p;
    if (b.ran) maxBytes = std::max({maxBytes, static_cast<double>(sum), static_cast<double>(b.predicted)});
    else maxBytes = std::max(maxBytes, static_cast<double>(b.predicted));
    if (b.ran) maxSeconds = std::max(maxSeconds, b.stepSeconds);
  }
  const double mib = 1024.0 * 1024.0;
  const Axis mem = niceAxis(maxBytes / mib, 5), step = niceAxis(maxSeconds > 0 ? maxSeconds : 1, 3);
  const double memAxis = mem.end * mib;  // bytes at the panel's right edge
  const double stepAxis = step.end;
  const double pxPerByte = kMemW / memAxis, pxPerSecond = kStepW / stepAxis;
  const double memX = kLabelW, stepX = kLabelW + kMemW + kGap;
  const double height = kTop + kRowH * static_cast<double>(bars.size()) + kBottom;
  const double width = stepX + kStepW + kRight;
  const double plotBottom = kTop + kRowH * static_cast<double>(bars.size());

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" << escape(title) << "</text>\n";
  // Legend.
  double lx = memX;
  for (int p = 0; p < kNumChartParts; ++p) {
    o << "<rect x=\"" << num(lx) << "\" y=\"30\" width=\"10\" height=\"10\" fill=\"" << kColors[p] << "\"/>"
      << "<text x=\"" << num(lx + 14) << "\" y=\"39\">" << nameOf(static_cast<ChartPart>(p)) << "</text>\n";
    lx += 100;
  }
  o << "<text x=\"" << num(memX) << "\" y=\"58\">device memory per rank (measured peak by part; | plan's "
       "predicted peak; dashed: budget)</text>\n";
  o << "<text x=\"" << num(stepX) << "\" y=\"58\">step time</text>\n";

  // Axes: a grid line and a label at each round step.
  for (int i = 0; i <= mem.steps; ++i) {
    const double f = static_cast<double>(i) / mem.steps;
    const double x = memX + f * kMemW;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(kTop - 4) << "\" x2=\"" << num(x) << "\" y2=\""
      << num(plotBottom) << "\" stroke=\"#ddd\"/>"
      << "<text x=\"" << num(x) << "\" y=\"" << num(plotBottom + 16) << "\" text-anchor=\"middle\">"
      << escape(formatBytes(static_cast<std::uint64_t>(std::llround(f * memAxis)))) << "</text>\n";
  }
  for (int i = 0; i <= step.steps; ++i) {
    const double f = static_cast<double>(i) / step.steps;
    const double xs = stepX + f * kStepW;
    o << "<line x1=\"" << num(xs) << "\" y1=\"" << num(kTop - 4) << "\" x2=\"" << num(xs) << "\" y2=\""
      << num(plotBottom) << "\" stroke=\"#ddd\"/>"
      << "<text x=\"" << num(xs) << "\" y=\"" << num(plotBottom + 16) << "\" text-anchor=\"middle\">"
      << escape(tickSeconds(f * stepAxis, stepAxis)) << "</text>\n";
  }

  for (std::size_t i = 0; i < bars.size(); ++i) {
    const ChartBar& b = bars[i];
    const double y = kTop + kRowH * static_cast<double>(i);
    const double yBar = y + (kRowH - kBarH) / 2;
    o << "<text x=\"" << num(kLabelW - 8) << "\" y=\"" << num(yBar + kBarH - 5) << "\" text-anchor=\"end\">"
      << escape(b.label) << "</text>\n";
    if (!b.ran) {
      o << "<text x=\"" << num(memX + 4) << "\" y=\"" << num(yBar + kBarH - 5) << "\" fill=\"#888\">"
        << escape(b.note.empty() ? "did not run" : b.note) << "</text>\n";
      continue;
    }
    double x = memX;
    for (int p = 0; p < kNumChartParts; ++p) {
      const double w = static_cast<double>(b.parts[p]) * pxPerByte;
      o << "<rect class=\"part\" data-rung=\"" << i << "\" data-part=\"" << nameOf(static_cast<ChartPart>(p))
        << "\" data-bytes=\"" << b.parts[p] << "\" x=\"" << num(x) << "\" y=\"" << num(yBar) << "\" width=\""
        << num(w) << "\" height=\"" << num(kBarH) << "\" fill=\"" << kColors[p] << "\"><title>"
        << escape(std::string(nameOf(static_cast<ChartPart>(p))) + ": " + formatBytes(b.parts[p]))
        << "</title></rect>\n";
      x += w;
    }
    const double xp = memX + static_cast<double>(b.predicted) * pxPerByte;
    o << "<line class=\"predicted\" data-rung=\"" << i << "\" data-bytes=\"" << b.predicted << "\" x1=\""
      << num(xp) << "\" y1=\"" << num(yBar - 3) << "\" x2=\"" << num(xp) << "\" y2=\"" << num(yBar + kBarH + 3)
      << "\" stroke=\"black\" stroke-width=\"2\"><title>" << escape("plan: " + formatBytes(b.predicted))
      << "</title></line>\n";
    const double ws = b.stepSeconds * pxPerSecond;
    o << "<rect class=\"step\" data-rung=\"" << i << "\" data-seconds=\"" << exact(b.stepSeconds) << "\" x=\""
      << num(stepX) << "\" y=\"" << num(yBar) << "\" width=\"" << num(ws) << "\" height=\"" << num(kBarH)
      << "\" fill=\"#9c755f\"/>"
      << "<text x=\"" << num(stepX + ws + 4) << "\" y=\"" << num(yBar + kBarH - 5) << "\">"
      << escape(seconds(b.stepSeconds)) << "</text>\n";
  }
  const double xb = memX + static_cast<double>(budgetBytes) * pxPerByte;
  o << "<line class=\"budget\" data-bytes=\"" << budgetBytes << "\" x1=\"" << num(xb) << "\" y1=\""
    << num(kTop - 6) << "\" x2=\"" << num(xb) << "\" y2=\"" << num(plotBottom) << "\" stroke=\"#c00\" "
    << "stroke-dasharray=\"5,3\"/><text x=\"" << num(xb) << "\" y=\"" << num(plotBottom + 32)
    << "\" text-anchor=\"middle\" fill=\"#c00\">"
    << escape("budget " + formatBytes(budgetBytes)) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace zrt::ladder
