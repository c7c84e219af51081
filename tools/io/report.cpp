#include "report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "tools/common/progress.h"

namespace zrt::iotool {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string pad(const std::string& s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

}  // namespace

std::string shortBytes(std::uint64_t b) {
  if (b % (1ull << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b % (1ull << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b % (1ull << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

nlohmann::json toJson(const RunResult& r) {
  nlohmann::json j = {
      {"mode", std::string(nameOf(r.config.mode))},
      {"block_size", r.config.blockSize},
      {"queue_depth", r.config.queueDepth},
      {"threads", r.config.threads},
      {"bytes", r.bytes},
      {"seconds", r.seconds},
      {"gbps", r.gbps},
      {"read_gbps", r.readGbps},
      {"write_gbps", r.writeGbps},
      {"iops", r.iops},
      {"p50_us", r.p50us},
      {"p99_us", r.p99us},
      {"mean_in_flight", r.meanInFlight},
      {"files", r.files},
      {"file_size", r.fileSize},
      {"single_submit", r.config.singleSubmit},
      {"fixed_buffers", r.config.fixedBuffers},
      {"buffered", r.config.buffered},
      {"engine", r.engine},
      {"verified_bytes", r.verifiedBytes},
      {"verify_errors", r.verifyErrors},
  };
  if (r.config.mode == Mode::Swap) {
    j["ranks"] = r.ranks;
    j["step_p50_ms"] = r.stepP50ms;
    j["step_p99_ms"] = r.stepP99ms;
  }
  return j;
}

std::string csvHeader() {
  return "mode,block_size,queue_depth,threads,single_submit,fixed_buffers,buffered,files,"
         "bytes,seconds,gbps,read_gbps,write_gbps,iops,p50_us,p99_us,ranks,step_p50_ms,"
         "step_p99_ms,verify_errors,mean_in_flight";
}

std::string toCsv(const RunResult& r) {
  std::ostringstream o;
  o << nameOf(r.config.mode) << ',' << r.config.blockSize << ',' << r.config.queueDepth << ','
    << r.config.threads << ',' << r.config.singleSubmit << ',' << r.config.fixedBuffers << ','
    << r.config.buffered << ',' << r.files << ',' << r.bytes << ',' << fixed(r.seconds, 6) << ','
    << fixed(r.gbps, 4) << ',' << fixed(r.readGbps, 4) << ',' << fixed(r.writeGbps, 4) << ','
    << fixed(r.iops, 1) << ',' << fixed(r.p50us, 1) << ',' << fixed(r.p99us, 1) << ','
    << r.ranks << ',' << fixed(r.stepP50ms, 3) << ',' << fixed(r.stepP99ms, 3) << ','
    << r.verifyErrors << ',' << fixed(r.meanInFlight, 2);
  return o.str();
}

std::string table(std::vector<RunResult> results) {
  std::stable_sort(results.begin(), results.end(), [](const RunResult& a, const RunResult& b) {
    if (a.config.mode != b.config.mode) return a.config.mode < b.config.mode;
    return a.gbps > b.gbps;
  });
  std::ostringstream o;
  Mode current = Mode::Swap;
  bool first = true;
  for (const RunResult& r : results) {
    if (first || r.config.mode != current) {
      current = r.config.mode;
      if (!first) o << '\n';
      first = false;
      o << "mode " << nameOf(current) << (results.size() > 1 ? ", best first" : "") << ":\n";
      o << pad("block", 7) << pad("qd", 5) << pad("thr", 5) << pad("submit", 8)
        << pad("fixed", 7) << pad("GB/s", 9) << pad("read", 8) << pad("write", 8)
        << pad("IOPS", 10) << pad("p50 us", 10) << pad("p99 us", 10);
      if (current == Mode::Swap) o << pad("step p50 ms", 13) << pad("step p99 ms", 13);
      o << '\n';
    }
    o << pad(shortBytes(r.config.blockSize), 7) << pad(std::to_string(r.config.queueDepth), 5)
      << pad(std::to_string(r.config.threads), 5)
      << pad(r.config.singleSubmit ? "single" : "batch", 8)
      << pad(r.config.fixedBuffers ? "on" : "off", 7) << pad(fixed(r.gbps, 3), 9)
      << pad(fixed(r.readGbps, 3), 8) << pad(fixed(r.writeGbps, 3), 8)
      << pad(fixed(r.iops, 0), 10) << pad(fixed(r.p50us, 0), 10) << pad(fixed(r.p99us, 0), 10);
    if (current == Mode::Swap) o << pad(fixed(r.stepP50ms, 2), 13) << pad(fixed(r.stepP99ms, 2), 13);
    o << '\n';
  }
  return o.str();
}

nlohmann::json tuneSection(const std::vector<RunResult>& results, std::string* summary) {
  struct Score {
    double read = 0;
    double write = 0;
  };
  using Key = std::tuple<std::uint64_t, int, int, bool>;  // block, qd, threads, single_submit
  std::map<Key, Score> scores;
  bool anyRead = false, anyWrite = false;
  for (const RunResult& r : results) {
    Score& s = scores[{r.config.blockSize, r.config.queueDepth, r.config.threads,
                       r.config.singleSubmit}];
    if (r.config.mode == Mode::Read) {
      s.read = std::max(s.read, r.gbps);
      anyRead = true;
    }
    if (r.config.mode == Mode::Write) {
      s.write = std::max(s.write, r.gbps);
      anyWrite = true;
    }
    if (r.config.mode == Mode::ReadWrite || r.config.mode == Mode::Swap) {
      s.read = std::max(s.read, r.readGbps);
      s.write = std::max(s.write, r.writeGbps);
      anyRead = anyWrite = true;
    }
  }
  auto value = [&](const Score& s) {
    if (anyRead && anyWrite) return s.read > 0 && s.write > 0 ? 2.0 / (1.0 / s.read + 1.0 / s.write) : 0.0;
    return anyRead ? s.read : s.write;
  };
  const Key* best = nullptr;
  double bestValue = -1;
  for (const auto& [k, s] : scores) {
    if (value(s) > bestValue) {
      bestValue = value(s);
      best = &k;
    }
  }
  if (best == nullptr) return nlohmann::json::object();
  const Score& s = scores[*best];
  if (summary) {
    *summary = zrt::detail::cat("best: block_size ", shortBytes(std::get<0>(*best)),
                                ", queue_depth ", std::get<1>(*best), ", intra_op_parallelism ",
                                std::get<2>(*best), ", single_submit ",
                                std::get<3>(*best) ? "true" : "false", ": read ",
                                fixed(s.read, 3), " GB/s, write ", fixed(s.write, 3), " GB/s");
  }
  return {{"aio",
           {{"block_size", std::get<0>(*best)},
            {"queue_depth", std::get<1>(*best)},
            {"intra_op_parallelism", std::get<2>(*best)},
            {"single_submit", std::get<3>(*best)},
            {"overlap_events", true}}}};
}

ProgressBar::ProgressBar(std::size_t total, bool rewrite) : total_(total), rewrite_(rewrite) {}

void ProgressBar::draw(double fraction, const std::string& tail) {
  const double overall = total_ ? (static_cast<double>(index_) + fraction) / static_cast<double>(total_) : 1;
  const std::string line = zrt::detail::cat(tools::progressBar(overall), ' ', index_ + (fraction >= 1 ? 1 : 0), '/',
                                            total_, ' ', label_, tail);
  if (rewrite_) std::fprintf(stderr, "%s%s", tools::kRewriteLine, line.c_str());
  else std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  lastDraw_ = std::chrono::steady_clock::now();
}

void ProgressBar::start(std::size_t index, const std::string& label) {
  index_ = index;
  label_ = label;
  draw(0, "");
}

void ProgressBar::advance(double fraction) {
  if (!rewrite_ || std::chrono::steady_clock::now() - lastDraw_ < std::chrono::milliseconds(100)) return;
  draw(std::min(fraction, 0.999), zrt::detail::cat(' ', static_cast<int>(std::min(fraction, 0.999) * 100), '%'));
}

void ProgressBar::done(const std::string& result) { draw(1, ": " + result); }

void ProgressBar::finish() {
  if (rewrite_) std::fprintf(stderr, "\n");
}

}  // namespace zrt::iotool
