#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "report.h"

namespace zrt::iotool {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

// A "nice" upper bound for the y axis: 1, 2 or 5 times a power of ten.
double niceCeil(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (v <= m * p) return m * p;
  }
  return 10 * p;
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

}  // namespace

std::string plotSvg(const std::vector<RunResult>& results) {
  std::map<Mode, std::vector<const RunResult*>> byMode;
  for (const auto& r : results) byMode[r.config.mode].push_back(&r);
  constexpr double kPanelW = 460, kPanelH = 320, kLeft = 60, kRight = 150, kTop = 40,
                   kBottom = 50;
  const double width = kPanelW * std::max<std::size_t>(1, byMode.size());
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
    << num(kPanelH) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  double x0 = 0;
  for (const auto& [mode, rs] : byMode) {
    std::set<std::uint64_t> blocks;
    double ymax = 0;
    // One series per (queue depth, threads, submission, fixed buffers), in numeric order.
    using Series = std::tuple<int, int, bool, bool>;
    std::map<Series, std::map<std::uint64_t, double>> lines;  // series -> block -> GB/s
    for (const RunResult* r : rs) {
      blocks.insert(r->config.blockSize);
      ymax = std::max(ymax, r->gbps);
      const Series key{r->config.queueDepth, r->config.threads, r->config.singleSubmit,
                       !r->config.fixedBuffers};
      double& v = lines[key][r->config.blockSize];
      v = std::max(v, r->gbps);  // repeated points: the best
    }
    auto seriesName = [](const Series& k) {
      std::string name = "qd " + std::to_string(std::get<0>(k));
      if (std::get<1>(k) != 1) name += ", " + std::to_string(std::get<1>(k)) + " thr";
      if (std::get<2>(k)) name += ", single";
      if (std::get<3>(k)) name += ", no fixed";
      return name;
    };
    ymax = niceCeil(ymax * 1.05);
    const double plotW = kPanelW - kLeft - kRight, plotH = kPanelH - kTop - kBottom;
    const std::vector<std::uint64_t> xs(blocks.begin(), blocks.end());
    auto px = [&](std::uint64_t b) {
      const auto i = static_cast<double>(std::find(xs.begin(), xs.end(), b) - xs.begin());
      return x0 + kLeft + (xs.size() == 1 ? plotW / 2 : i * plotW / static_cast<double>(xs.size() - 1));
    };
    auto py = [&](double v) { return kTop + plotH - v / ymax * plotH; };
    o << "<text x=\"" << num(x0 + kLeft + plotW / 2) << "\" y=\"20\" text-anchor=\"middle\" "
      << "font-size=\"13\">" << nameOf(mode) << ": GB/s vs block size</text>\n";
    // Axes, grid and ticks.
    for (int i = 0; i <= 5; ++i) {
      const double v = ymax * i / 5, y = py(v);
      o << "<line x1=\"" << num(x0 + kLeft) << "\" y1=\"" << num(y) << "\" x2=\""
        << num(x0 + kLeft + plotW) << "\" y2=\"" << num(y) << "\" stroke=\"#ddd\"/>\n"
        << "<text x=\"" << num(x0 + kLeft - 6) << "\" y=\"" << num(y + 4)
        << "\" text-anchor=\"end\">" << num(v) << "</text>\n";
    }
    o << "<line x1=\"" << num(x0 + kLeft) << "\" y1=\"" << num(kTop) << "\" x2=\""
      << num(x0 + kLeft) << "\" y2=\"" << num(kTop + plotH) << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << num(x0 + kLeft) << "\" y1=\"" << num(kTop + plotH) << "\" x2=\""
      << num(x0 + kLeft + plotW) << "\" y2=\"" << num(kTop + plotH) << "\" stroke=\"black\"/>\n";
    for (std::uint64_t b : xs) {
      o << "<text x=\"" << num(px(b)) << "\" y=\"" << num(kTop + plotH + 16)
        << "\" text-anchor=\"middle\">" << shortBytes(b) << "</text>\n";
    }
    o << "<text x=\"" << num(x0 + kLeft + plotW / 2) << "\" y=\"" << num(kPanelH - 12)
      << "\" text-anchor=\"middle\">block size</text>\n"
      << "<text x=\"" << num(x0 + 14) << "\" y=\"" << num(kTop + plotH / 2)
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << num(x0 + 14) << ' '
      << num(kTop + plotH / 2) << ")\">GB/s</text>\n";
    // One line per series, with a legend entry.
    int k = 0;
    for (const auto& [key, points] : lines) {
      const std::string series = seriesName(key);
      const char* color = kColors[k % std::size(kColors)];
      std::string pts;
      for (const auto& [b, v] : points) pts += num(px(b)) + "," + num(py(v)) + " ";
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\""
        << pts << "\"/>\n";
      for (const auto& [b, v] : points) {
        o << "<circle cx=\"" << num(px(b)) << "\" cy=\"" << num(py(v)) << "\" r=\"3\" fill=\""
          << color << "\"><title>" << escape(series) << ", " << shortBytes(b) << ": " << num(v * 1000)
          << " MB/s</title></circle>\n";
      }
      const double ly = kTop + 14.0 * k;
      o << "<line x1=\"" << num(x0 + kLeft + plotW + 10) << "\" y1=\"" << num(ly) << "\" x2=\""
        << num(x0 + kLeft + plotW + 28) << "\" y2=\"" << num(ly) << "\" stroke=\"" << color
        << "\" stroke-width=\"2\"/>\n"
        << "<text x=\"" << num(x0 + kLeft + plotW + 32) << "\" y=\"" << num(ly + 4) << "\">"
        << escape(series) << "</text>\n";
      ++k;
    }
    x0 += kPanelW;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace zrt::iotool
