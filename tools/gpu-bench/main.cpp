// zrt-gpu-bench: ZRT's GPU paths against the CUDA libraries' own at their best, measured side by
// side in one run, in alternating turns (ZRT's, then the yardstick's, again and again), so a busy
// GPU or host slows both alike:
//   copies  ZRT's pinned transfers (Device::allocatePinned memory, --chunk pieces through
//           Device::copyAsync on two streams) against one cudaMemcpyAsync from cudaMallocHost
//           memory, host to device and back (pinned_copies.h);
//   adam    the CUDA AdamW step against a device-to-device copy of the bytes it moves
//           (adam_vs_copy.h);
//   gemm    cuBLAS's fp32 GEMM rate at one shape, the bar for zrt-train's model FLOP rate
//           (gemm_rate.h; scripts/gpu_figures.py divides one by the other).
//   zrt-gpu-bench [--parts copies,adam,gemm] [--copy-bytes 1G] [--chunk 64M] [--params 256M]
//                 [--gemm 4096x3072x768] [--turns 7] [--json]
// Every figure is the median over --turns turns; "ratio" is the median of each turn's
// yardstick time / ZRT time (ZRT's speed as a fraction of the yardstick's; for gemm, a rate
// only). The copies are read back and the Adam step and the GEMM checked against float64 after
// timing, so no rate is reported for work that did not happen.
// Exit status: 0 done; 1 a CUDA or check failure; 2 bad input; 77 no GPU visible (before
// anything runs).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "tools/common/statistics.h"
#include "tools/gpu-bench/adam_vs_copy.h"
#include "tools/gpu-bench/gemm_rate.h"
#include "tools/gpu-bench/pinned_copies.h"

using namespace zrt;
using namespace zrt::gpubench;

namespace {

struct Options {
  std::string device = "cuda:0";
  std::vector<std::string> parts{"copies", "adam", "gemm"};
  std::string copyBytes = "1G";
  std::string chunk = "64M";
  std::string params = "256M";
  std::string gradType = "fp32";
  std::string copy = "none";
  std::string gemm = "4096x3072x768";
  int gemmRepeats = 20;
  int turns = 7;
  bool json = false;
};

// One line of the report: what was measured, ZRT's rate and the yardstick's, in `unit`.
struct Figure {
  std::string name;
  std::string yardstick;
  std::string unit;
  double zrtRate = 0;
  std::optional<double> yardstickRate;
  std::optional<double> ratio;
};

GemmShape parseShape(const std::string& text) {
  GemmShape s;
  char x1 = 0, x2 = 0;
  std::istringstream in(text);
  if (!(in >> s.m >> x1 >> s.n >> x2 >> s.k) || x1 != 'x' || x2 != 'x' || in.peek() != EOF)
    ZRT_THROW(InvalidArgument, "--gemm: expected MxNxK (e.g. 4096x3072x768), got '", text, "'");
  return s;
}

// Rates from paired turns: the medians of each side, and the median of the per-turn ratios.
Figure paired(std::string name, std::string yardstick, std::string unit, double amount,
              const std::vector<PairedSeconds>& turns) {
  std::vector<double> zrt, cuda, ratios;
  for (const PairedSeconds& t : turns) {
    zrt.push_back(t.zrt);
    cuda.push_back(t.cuda);
    ratios.push_back(t.cuda / t.zrt);
  }
  return {std::move(name),      std::move(yardstick),  std::move(unit),
          amount / median(zrt), amount / median(cuda), median(ratios)};
}

// The options' values, checked before anything runs: bad input is reported as such on any
// machine, a GPU or none.
struct Plan {
  std::vector<std::string> parts;
  std::size_t copyBytes = 0, chunk = 0, params = 0;
  DType gradType = DType::F32;
  std::optional<DType> copyType;
  GemmShape shape;
  bool wants(const char* part) const {
    for (const std::string& p : parts)
      if (p == part) return true;
    return false;
  }
};

Plan plan(const Options& o) {
  Plan p;
  for (const std::string& part : o.parts)
    if (part != "copies" && part != "adam" && part != "gemm")
      ZRT_THROW(InvalidArgument, "--parts: expected copies, adam or gemm, got '", part, "'");
  p.parts = o.parts;
  p.copyBytes = parseBytes(o.copyBytes, "--copy-bytes");
  p.chunk = parseBytes(o.chunk, "--chunk");
  p.params = parseBytes(o.params, "--params");
  p.gradType = parseDType(o.gradType);
  if (o.copy != "none") p.copyType = parseDType(o.copy);
  p.shape = parseShape(o.gemm);
  return p;
}

int run(const Options& o, const Plan& p) {
  MemoryLedger ledger("zrt-gpu-bench");
  auto device = makeDevice(o.device, ledger);
  if (device->kind() != DeviceKind::Cuda)
    ZRT_THROW(InvalidArgument, "--device: zrt-gpu-bench measures a GPU, got '", o.device, "'");
  std::vector<Figure> figures;
  if (p.wants("copies")) {
    PinnedCopies copies(*device, p.copyBytes, p.chunk);
    std::vector<PairedSeconds> up, down;
    // Warm-up: the first use of each stream and path.
    copies.hostToDevice();
    copies.deviceToHost();
    for (int t = 0; t < o.turns; ++t) {
      up.push_back(copies.hostToDevice());
      down.push_back(copies.deviceToHost());
    }
    copies.verify();
    const std::string what = formatBytes(p.copyBytes) + " in " + formatBytes(p.chunk) + " pieces";
    figures.push_back(paired("host to device, " + what, "cudaMemcpyAsync, one call", "GB/s",
                             static_cast<double>(p.copyBytes) / 1e9, up));
    figures.push_back(paired("device to host, " + what, "cudaMemcpyAsync, one call", "GB/s",
                             static_cast<double>(p.copyBytes) / 1e9, down));
  }
  if (p.wants("adam")) {
    AdamVsCopy adam(*device, p.params, p.gradType, p.copyType);
    adam.turn();
    std::vector<PairedSeconds> turns;
    for (int t = 0; t < o.turns; ++t) turns.push_back(adam.turn());
    adam.verify();
    figures.push_back(paired("CUDA AdamW, " + std::to_string(p.params) + " params, " + o.gradType +
                                 " grads" + (p.copyType ? ", " + o.copy + " copy" : std::string()),
                             "device-to-device copy of the same bytes", "GB/s",
                             static_cast<double>(adam.bytesMoved()) / 1e9, turns));
  }
  if (p.wants("gemm")) {
    GemmRate gemm(*device, p.shape, o.gemmRepeats);
    gemm.turn();
    std::vector<double> seconds;
    for (int t = 0; t < o.turns; ++t) seconds.push_back(gemm.turn());
    gemm.verify();
    figures.push_back({"cuBLAS fp32 GEMM " + o.gemm, "", "TFLOP/s",
                       gemm.flopsPerTurn() / median(seconds) / 1e12, std::nullopt, std::nullopt});
  }

  if (o.json) {
    for (const Figure& f : figures) {
      nlohmann::ordered_json j;
      j["figure"] = f.name;
      j["unit"] = f.unit;
      j["zrt"] = f.zrtRate;
      if (f.yardstickRate) {
        j["yardstick"] = f.yardstick;
        j["yardstick_rate"] = *f.yardstickRate;
        j["ratio"] = *f.ratio;
      }
      j["device"] = device->name();
      j["turns"] = o.turns;
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  std::printf("zrt-gpu-bench on %s, median of %d turns\n", device->name().c_str(), o.turns);
  std::printf("%-48s %12s %14s  %-40s %6s\n", "figure", "ZRT", "yardstick", "yardstick is",
              "ratio");
  for (const Figure& f : figures) {
    char zrt[32], ys[32] = "-", ratio[16] = "-";
    std::snprintf(zrt, sizeof zrt, "%.2f %s", f.zrtRate, f.unit.c_str());
    if (f.yardstickRate) {
      std::snprintf(ys, sizeof ys, "%.2f %s", *f.yardstickRate, f.unit.c_str());
      std::snprintf(ratio, sizeof ratio, "%.3f", *f.ratio);
    }
    std::printf("%-48s %12s %14s  %-40s %6s\n", f.name.c_str(), zrt, ys, f.yardstick.c_str(),
                ratio);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Times ZRT's GPU paths (pinned copies, CUDA AdamW) against the CUDA libraries' own, and "
      "cuBLAS's GEMM rate, side by side in one run"};
  Options o;
  app.add_option("--device", o.device, "the GPU (cuda:N)")->capture_default_str();
  app.add_option("--parts", o.parts, "what to measure: copies, adam, gemm")->delimiter(',');
  app.add_option("--copy-bytes", o.copyBytes, "bytes each copy moves (K/M/G are binary)")
      ->capture_default_str();
  app.add_option("--chunk", o.chunk, "the piece ZRT's side copies at a time")
      ->capture_default_str();
  app.add_option("--params", o.params, "parameters the Adam step updates (K/M/G binary)")
      ->capture_default_str();
  app.add_option("--grad-dtype", o.gradType, "the Adam step's gradients: fp32, fp16 or bf16")
      ->capture_default_str();
  app.add_option("--copy", o.copy, "parameter copy the Adam step writes: none, fp16, bf16")
      ->capture_default_str();
  app.add_option("--gemm", o.gemm,
                 "the GEMM's MxNxK (zrt-train's widest product: tokens x 4 hidden x hidden)")
      ->capture_default_str();
  app.add_option("--gemm-repeats", o.gemmRepeats, "products a GEMM turn times")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--turns", o.turns, "timed turns (the median is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object per figure instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const Plan p = plan(o);
    if (!cudaDeviceAvailable()) {
      std::fprintf(
          stderr,
          "zrt-gpu-bench: no GPU visible (no driver, or no device answers); nothing measured\n");
      return 77;
    }
    return run(o, p);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "zrt-gpu-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-gpu-bench: %s\n", e.what());
    return 1;
  }
}
