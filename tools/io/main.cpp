// zrt-io: stress-tests offload throughput with ZRT's own engine, as training will use it
// (docs/offload.md). Sequential read / write / read-while-write streams or an optimizer step's
// swap pattern; single runs, sweeps over lists of settings, and --tune, which prints the best
// setting as a DeepSpeed `aio` config section. Exit codes: 0 ok, 1 an I/O or verify failure,
// 2 bad flags.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "io_benchmark.h"
#include "core/build_config.h"
#include "core/config/config.h"
#include "report.h"
#include "core/error.h"
#include "core/units.h"
#include "svg_plot.h"
#include "tools/common/progress.h"

using namespace zrt;
using namespace zrt::iotool;

namespace {

std::vector<std::string> splitList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::size_t start = 0;
    while (start <= item.size()) {
      const std::size_t comma = item.find(',', start);
      const std::string part = item.substr(start, comma == std::string::npos ? std::string::npos
                                                                             : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::vector<std::uint64_t> byteList(const std::vector<std::string>& items, const char* flag) {
  std::vector<std::uint64_t> out;
  for (const auto& s : splitList(items)) out.push_back(parseBytes(s, flag));
  if (out.empty()) ZRT_THROW(InvalidArgument, flag, ": empty list");
  return out;
}

std::vector<int> intList(const std::vector<std::string>& items, const char* flag, int lo, int hi) {
  std::vector<int> out;
  for (const auto& s : splitList(items)) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || v < lo || v > hi)
      ZRT_THROW(InvalidArgument, flag, ": '", s, "' is not an integer in [", lo, ", ", hi, "]");
    out.push_back(v);
  }
  if (out.empty()) ZRT_THROW(InvalidArgument, flag, ": empty list");
  return out;
}

// --tune prints an aio section meant to be pasted into a config, so every setting it may print
// must be one the config reader accepts (docs/config.md: block_size a multiple of 4096, ...);
// the engine itself takes more (512-byte multiples), which plain runs and sweeps may use.
void checkTunable(std::uint64_t blockSize, int queueDepth, int threads) {
  const nlohmann::json section = {{"aio",
                                   {{"block_size", blockSize},
                                    {"queue_depth", queueDepth},
                                    {"intra_op_parallelism", threads}}}};
  try {
    parseConfig(section.dump(), "--tune", 1);
  } catch (const ConfigError& e) {
    ZRT_THROW(InvalidArgument, "--tune prints an aio section for a config, but a config would "
                               "refuse this setting: ", e.path(), ": ", e.problem());
  }
}

std::vector<bool> onOffList(const std::vector<std::string>& items, const char* flag) {
  std::vector<bool> out;
  for (const auto& s : splitList(items)) {
    if (s == "on" || s == "1" || s == "true") out.push_back(true);
    else if (s == "off" || s == "0" || s == "false") out.push_back(false);
    else ZRT_THROW(InvalidArgument, flag, ": '", s, "' is not on or off");
  }
  if (out.empty()) ZRT_THROW(InvalidArgument, flag, ": empty list");
  return out;
}

// Every flag as given on the command line (defaults where not), before it is checked.
struct Flags {
  std::vector<std::string> paths, filenames;
  std::string size = "1G", bytes = "0", requestSize = "0", stripeUnit = "1M", tileSize = "16M";
  std::vector<std::string> blockSizes{"1M"}, queueDepths{"8"}, threads{"1"}, modes{"read"},
      fixedBuffers{"on"};
  bool buffered = false, singleSubmit = false, sweep = false, tune = false, verify = false;
  bool json = false, csv = false, quiet = false;
  int files = 1, ranks = 4, requests = 0;
  double duration = 0;
  std::string pattern = "seq", engine = "auto", plot, configFile, hugePages = "on";
  std::string progress = "auto";
};

void addFlags(CLI::App& app, Flags& f) {
  app.set_version_flag("--version", ZRT_VERSION_STRING);
  app.option_defaults()->always_capture_default();
  app.add_option("--path", f.paths, "directory for the test files; several (repeat or comma "
                                    "list) stripe each file over them")
      ->delimiter(',');
  app.add_option("--filename", f.filenames, "use these files instead (created and laid out "
                                            "when missing or short, kept afterwards), like fio's")
      ->delimiter(',');
  app.add_option("--size", f.size, "size of each file (K, M, G suffixes)");
  app.add_option("--block-size", f.blockSizes, "transfer size; a comma list to sweep")
      ->delimiter(',');
  app.add_option("--queue-depth", f.queueDepths, "transfers in flight per ring; a list to sweep")
      ->delimiter(',');
  app.add_option("--threads", f.threads, "intra_op_parallelism: rings sharing each request; a "
                                         "list to sweep")->delimiter(',');
  app.add_option("--mode", f.modes, "read, write or rw (read while writing); a list to sweep")
      ->delimiter(',');
  app.add_flag("--buffered", f.buffered, "buffered I/O through the page cache (default O_DIRECT)");
  app.add_flag("--single-submit", f.singleSubmit, "submit each transfer on its own");
  app.add_option("--fixed-buffers", f.fixedBuffers, "registered buffers: on, off, or on,off to "
                                                    "sweep")->delimiter(',');
  app.add_option("--files", f.files, "number of files")->check(CLI::Range(1, 4096));
  app.add_option("--duration", f.duration, "seconds per run (instead of a byte count)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", f.bytes, "bytes to move per run (default: every file once)");
  app.add_option("--request-size", f.requestSize, "bytes per request (default: a quarter of "
                                                  "block size x queue depth x threads, in whole "
                                                  "blocks, at most 256M)");
  app.add_option("--requests", f.requests, "requests kept outstanding (default 0: the rings' "
                                           "fill plus one request queued behind it)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--huge-pages", f.hugePages, "pinned buffers in transparent huge pages where "
                                              "the kernel can: on or off")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--stripe-unit", f.stripeUnit, "stripe unit with several --path");
  app.add_option("--engine", f.engine, "auto, io_uring, threads or null");
  app.add_flag("--sweep", f.sweep, "run every combination of the lists; table best first");
  app.add_flag("--tune", f.tune, "sweep (default lists where none given) and print the best "
                                 "setting as a DeepSpeed aio section");
  app.add_flag("--verify", f.verify, "write patterns and check every byte read back");
  app.add_option("--pattern", f.pattern, "seq (streams) or swap (an offloaded optimizer step)")
      ->check(CLI::IsMember({"seq", "swap"}));
  app.add_option("--ranks", f.ranks, "swap pattern: ranks stepping at once")
      ->check(CLI::Range(1, 256));
  app.add_option("--tile-size", f.tileSize, "swap pattern: bytes per tile of each state file");
  app.add_flag("--json", f.json, "one JSON object per line per result");
  app.add_flag("--csv", f.csv, "CSV with a header line");
  app.add_option("--plot", f.plot, "write an SVG of GB/s against block size and queue depth");
  app.add_flag("--quiet", f.quiet, "no progress or layout messages");
  app.add_option("--progress", f.progress, "on: one progress bar on stderr rewritten in place; off: "
                                           "a line as each setting starts and ends; auto: on when "
                                           "stderr is a terminal")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--config", f.configFile, "a DeepSpeed/ZRT config: its aio section is the "
                                            "setting to run (flags given override it), its "
                                            "nvme_path the default --path");
}

// --config: the config's aio section, as training will read it (use_gds warned about), stands
// in for the setting flags not given, and its nvme_path for a missing --path.
void applyConfigFile(const CLI::App& app, Flags& f) {
  if (f.configFile.empty()) return;
  const Config cfg = loadConfig(f.configFile, 1);
  const offload::AioOptions aio = offload::aioOptionsFrom(cfg.aio);
  if (app.count("--block-size") == 0) f.blockSizes = {std::to_string(aio.block_size)};
  if (app.count("--queue-depth") == 0) f.queueDepths = {std::to_string(aio.queue_depth)};
  if (app.count("--threads") == 0) f.threads = {std::to_string(aio.intra_op_parallelism)};
  if (app.count("--single-submit") == 0) f.singleSubmit = aio.single_submit;
  if (f.paths.empty() && f.filenames.empty()) {
    const auto& zo = cfg.zero_optimization;
    f.paths = !zo.offload_optimizer.nvme_path.empty() ? zo.offload_optimizer.nvme_path
                                                       : zo.offload_param.nvme_path;
    if (f.paths.empty()) ZRT_THROW(InvalidArgument, f.configFile, " has no nvme_path: give --path");
  }
}

// What every run shares: where the files are, how large, how much to move.
Workload workloadFrom(const CLI::App& app, const Flags& f) {
  if (f.paths.empty() == f.filenames.empty())
    ZRT_THROW(InvalidArgument, "give either --path DIR or --filename FILE");
  if (!f.filenames.empty() && app.count("--files") > 0)
    ZRT_THROW(InvalidArgument, "--files goes with --path; with --filename, list the files");
  Workload w;
  const bool swap = f.pattern == "swap";
  w.paths.assign(f.paths.begin(), f.paths.end());
  w.namedFiles.assign(f.filenames.begin(), f.filenames.end());
  w.files = f.filenames.empty() ? f.files : static_cast<int>(f.filenames.size());
  // The swap pattern makes 3 files per rank: a smaller default size keeps it quick.
  const std::string size = swap && app.count("--size") == 0 ? "128M" : f.size;
  w.fileSize = parseBytes(size, "--size");
  w.duration = f.duration;
  w.bytes = parseBytes(f.bytes, "--bytes");
  w.requestSize = parseBytes(f.requestSize, "--request-size");
  w.requests = f.requests;
  w.stripeUnit = parseBytes(f.stripeUnit, "--stripe-unit");
  w.verify = f.verify;
  w.hugePages = f.hugePages == "on";
  w.swapPattern = swap;
  w.ranks = f.ranks;
  w.tileSize = parseBytes(f.tileSize, "--tile-size");
  w.quiet = f.quiet || f.json || f.csv;
  if (w.fileSize % 4096 != 0) ZRT_THROW(InvalidArgument, "--size must be a multiple of 4K");
  if (w.stripeUnit == 0 || w.stripeUnit % 4096 != 0)
    ZRT_THROW(InvalidArgument, "--stripe-unit must be a positive multiple of 4K");
  return w;
}

// The settings to run: every combination of the lists (with --tune, ds_nvme_tune's grid around
// DeepSpeed's defaults for the lists not given), each checked as the engine would.
std::vector<RunConfig> settingsFrom(const CLI::App& app, Flags f) {
  const bool swap = f.pattern == "swap";
  if (f.tune) {
    if (app.count("--block-size") == 0) f.blockSizes = {"256K,1M,4M,8M"};
    if (app.count("--queue-depth") == 0) f.queueDepths = {"4,8,16,32"};
    if (app.count("--threads") == 0) f.threads = {"1,2"};
    if (app.count("--mode") == 0 && !swap) f.modes = {"read,write"};
  }
  const auto bs = byteList(f.blockSizes, "--block-size");
  const auto qds = intList(f.queueDepths, "--queue-depth", 1, 4096);
  const auto ths = intList(f.threads, "--threads", 1, 256);
  const auto fixed = onOffList(f.fixedBuffers, "--fixed-buffers");
  std::vector<Mode> ms;
  if (swap) ms = {Mode::Swap};
  else for (const auto& m : splitList(f.modes)) ms.push_back(parseMode(m));
  const offload::EngineKind kind = offload::parseEngineKind(f.engine);
  std::vector<RunConfig> configs;
  for (Mode m : ms)
    for (auto b : bs)
      for (int q : qds)
        for (int t : ths)
          for (bool fx : fixed) {
            RunConfig c;
            c.mode = m;
            c.blockSize = b;
            c.queueDepth = q;
            c.threads = t;
            c.singleSubmit = f.singleSubmit;
            c.fixedBuffers = fx;
            c.buffered = f.buffered;
            c.engine = kind;
            offload::AioOptions probe;
            probe.block_size = b;
            probe.queue_depth = q;
            probe.intra_op_parallelism = t;
            offload::validate(probe);
            if (f.tune) checkTunable(b, q, t);
            configs.push_back(c);
          }
  if (configs.size() > 1 && !f.sweep && !f.tune)
    ZRT_THROW(InvalidArgument, "lists of values give ", configs.size(),
              " settings: add --sweep (or --tune) to run them all");
  return configs;
}

std::string fixedGbps(double gbps) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", gbps);
  return text;
}

// Runs each setting in turn; JSON and CSV lines go out as each finishes, so a long sweep shows
// its results as it goes.
std::vector<RunResult> runAll(Workspace& ws, const std::vector<RunConfig>& configs,
                              const Flags& f) {
  std::vector<RunResult> results;
  const bool progress = !f.quiet;
  ProgressBar bar(configs.size(), tools::rewriteProgress(f.progress, ::isatty(STDERR_FILENO) == 1));
  const std::function<void(double)> advance = [&](double fraction) { bar.advance(fraction); };
  if (f.csv) std::cout << csvHeader() << '\n';
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const RunConfig& c = configs[i];
    if (progress) {
      bar.start(i, zrt::detail::cat(nameOf(c.mode), " bs ", formatBytes(c.blockSize), " qd ",
                                    c.queueDepth, " threads ", c.threads));
    }
    results.push_back(ws.run(c, progress ? advance : std::function<void(double)>{}));
    const RunResult& r = results.back();
    if (progress) bar.done(zrt::detail::cat(fixedGbps(r.gbps), " GB/s"));
    if (f.json) std::cout << toJson(r).dump() << std::endl;
    if (f.csv) std::cout << toCsv(r) << std::endl;
  }
  if (progress) bar.finish();
  return results;
}

// The human table (stderr under --tune, whose stdout carries only the aio section, ready to
// paste or pipe), --tune's section and --plot's SVG.
void reportResults(const std::vector<RunResult>& results, const Flags& f, const Workload& w) {
  if (!f.json && !f.csv) {
    std::ostream& out = f.tune ? std::cerr : std::cout;
    out << table(results);
    // One run: the engine's full description; a sweep: only which engine (the rest varies).
    if (results.size() == 1) out << "engine: " << results.front().engine << '\n';
    else if (!results.empty())
      out << "engine: " << results.front().engine.substr(0, results.front().engine.find(':'))
          << '\n';
  }
  if (f.tune) {
    std::string summary;
    const auto section = tuneSection(results, &summary);
    std::fprintf(stderr, "zrt-io: %s\n", summary.c_str());
    std::cout << section.dump(2) << '\n';
  }
  if (!f.plot.empty()) {
    std::ofstream out(f.plot);
    out << plotSvg(results);
    if (!out) ZRT_THROW(IoError, "cannot write the plot to '", f.plot, "'");
    if (!w.quiet) std::fprintf(stderr, "zrt-io: plot written to %s\n", f.plot.c_str());
  }
}

// Exit status 1 when any byte read back was wrong, naming the first; "verify ok" otherwise.
int verifyStatus(const std::vector<RunResult>& results, const Flags& f, const Workload& w) {
  std::uint64_t errors = 0;
  std::uint64_t checked = 0;
  for (const auto& r : results) {
    errors += r.verifyErrors;
    checked += r.verifiedBytes;
    if (!r.firstVerifyError.empty())
      std::fprintf(stderr, "zrt-io: verify FAILED: %s\n", r.firstVerifyError.c_str());
  }
  if (f.verify && errors == 0 && !w.quiet)
    std::fprintf(stderr, "zrt-io: verify ok: %s checked\n", formatBytes(checked).c_str());
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zrt-io: offload I/O stress test and tuner (ZRT's io_uring engine)"};
  Flags flags;
  addFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "zrt-io: %s\nRun with --help for the flags.\n", e.what());
    return 2;
  }

  Workload w;
  std::vector<RunConfig> configs;
  try {
    if (flags.json && flags.csv) ZRT_THROW(InvalidArgument, "--json and --csv: pick one");
    applyConfigFile(app, flags);
    w = workloadFrom(app, flags);
    configs = settingsFrom(app, flags);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "zrt-io: %s\n", e.what());
    return 2;
  }

  try {
    Workspace ws(w);
    const std::vector<RunResult> results = runAll(ws, configs, flags);
    reportResults(results, flags, w);
    return verifyStatus(results, flags, w);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "zrt-io: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-io: %s\n", e.what());
    return 1;
  }
}
