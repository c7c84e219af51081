// zrt-optim-bench: times the CPU Adam/AdamW step on each SIMD path against two yardsticks
// measured in the same run, in alternating turns: the roofline kernel (the same loads and stores,
// no arithmetic: the fastest this step can go on this machine) and torch.optim's AdamW/Adam with
// foreach=True (Debian's python3-torch, in a /usr/bin/python3 process kept alive beside the
// bench) on the same size.
//
//   zrt-optim-bench [--params 64M,256M] [--threads 1,2] [--paths avx512,avx2] [--json] ...
//
// Effective bandwidth counts the bytes the step must move: reads of param, grad, exp_avg,
// exp_avg_sq and writes of param, exp_avg, exp_avg_sq (28 bytes per parameter with fp32
// gradients), plus the parameter copy when one is written; the roofline kernel moves exactly
// these. Every figure is the median of --steps timed turns; a turn runs the roofline, each path
// and torch's step back to back (roofline, path 1, path 2, torch, roofline, ...), so a noisy
// neighbour slows every column alike. "of roof" is GB/s / roof GB/s of the same row (the ratio
// of the medians). The roofline runs the widest path's loads and stores: the bar is the fastest
// memory traffic, not the path's own.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/optim/adam.h"
#include "offload/aligned_buffer.h"
#include "runtime/optim/isa.h"
#include "core/timing.h"
#include "core/units.h"
#include "tools/common/statistics.h"
#include "tools/optim-bench/torch_process.h"

using namespace zrt;
using namespace zrt::optim;

namespace {

// 2 MiB-aligned, huge-page-advised and left untouched until fill() (so the pages land near the
// threads that stream them); the roofline runs on the same buffers.
offload::AlignedBuffer benchBuffer(std::size_t bytes) {
  offload::AlignedBuffer b(bytes, std::size_t{2} << 20, offload::AlignedBuffer::Init::Untouched);
  b.adviseHugePages();
  return b;
}

struct Options {
  std::vector<std::string> params{"64M", "256M"};
  std::vector<int> threads{1, 2};
  std::vector<std::string> paths;
  std::string optimizer = "adamw";
  std::string gradType = "fp32";
  std::string copy = "none";
  int steps = 5;
  bool torch = true;
  bool json = false;
  std::string python = ZRT_TORCH_PYTHON;
};

struct Row {
  std::string path;
  std::size_t params;
  int threads;
  double seconds;  // medians
  double rooflineSeconds;
  double pairedRooflineFraction;  // median over turns of that turn's roofline time / step time
  std::optional<double> torchSeconds;
  double bestSeconds;  // fastest step seen
  double bestRooflineSeconds;
  std::optional<double> bestTorchSeconds;
};

template <class Fn>
double timeOnce(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return secondsSince(t0);
}

// Fills the state with plausible values (parameters ~1, gradients ~1e-2, moments 0), in
// parallel so the pages land wherever the kernels' threads run.
void fill(const AdamState& s) {
  auto* g32 = static_cast<float*>(const_cast<void*>(s.grad));
  auto* g16 = static_cast<std::uint16_t*>(const_cast<void*>(s.grad));
  const auto n = static_cast<std::int64_t>(s.size);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::uint32_t>(i) * 2654435761u;
    const float x = static_cast<float>(u >> 8) * (1.0f / 16777216.0f) - 0.5f;  // [-0.5, 0.5)
    s.param[i] = 2.0f * x;
    s.expAvg[i] = 0.0f;
    s.expAvgSq[i] = 0.0f;
    const float g = 0.02f * x;
    switch (s.gradType) {
      case DType::F32:
        g32[i] = g;
        break;
      case DType::F16:
        g16[i] = floatToHalf(g);
        break;
      case DType::BF16:
        g16[i] = floatToBf16(g);
        break;
    }
    if (s.paramCopy)
      std::memset(static_cast<char*>(s.paramCopy) + i * dtypeSize(s.copyType), 0,
                  dtypeSize(s.copyType));
  }
}

int run(const Options& o) {
  const DType gradType = parseDType(o.gradType);
  const bool copy = o.copy != "none";
  const DType copyType = copy ? parseDType(o.copy) : DType::F16;
  if (o.optimizer != "adam" && o.optimizer != "adamw") {
    ZRT_THROW(InvalidArgument, "--optimizer must be adam or adamw, got '", o.optimizer, "'");
  }
  std::vector<Isa> paths;
  if (o.paths.empty()) {
    const std::vector<Isa> all = supportedIsas();  // narrowest first; list the widest first
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (*it != Isa::Scalar) paths.push_back(*it);
    }
    if (paths.empty()) paths.push_back(Isa::Scalar);
  } else {
    for (const auto& p : o.paths) paths.push_back(resolveIsa(parseIsa(p, "--paths")));
  }
  for (int t : o.threads) {
    if (t < 1) ZRT_THROW(InvalidArgument, "--threads: each count must be >= 1, got ", t);
  }
  // The roofline always runs the widest path this processor has, whatever --paths lists (and in
  // whatever order): the bar is the fastest memory traffic possible, not a path's own.
  const Isa roofIsa = supportedIsas().back();
  const std::size_t bytesPerParam =
      4 * 3 * 2 + dtypeSize(gradType) + (copy ? dtypeSize(copyType) : 0);

  std::string torchVersion;
  std::vector<Row> rows;
  for (const std::string& text : o.params) {
    const std::size_t n = parseBytes(text, "--params");
    if (n == 0) ZRT_THROW(InvalidArgument, "--params: counts must be > 0, got '", text, "'");
    std::vector<Row> sizeRows;
    // Started first, so its allocation and first step are done before the timed turns.
    std::optional<bench::TorchProcess> torch;
    if (o.torch) {
      torch.emplace(o.python, o.optimizer, n);
      torchVersion = torch->version();
    }
    {
      offload::AlignedBuffer p = benchBuffer(n * 4), m = benchBuffer(n * 4), v = benchBuffer(n * 4),
                             g = benchBuffer(n * dtypeSize(gradType));
      std::optional<offload::AlignedBuffer> c;
      if (copy) c.emplace(benchBuffer(n * dtypeSize(copyType)));
      AdamState s{p.as<float>(), m.as<float>(),
                  v.as<float>(), g.as<void>(),
                  gradType,      c ? c->as<void>() : nullptr,
                  copyType,      n};
      fill(s);
      AdamHyper h;
      h.weightDecay = 0.01;
      h.decoupledWeightDecay = o.optimizer == "adamw";
      for (int threads : o.threads) {
        // One warm-up of each, then timed turns: roofline, each path, torch.
        adamRoofline(s, 0, n, {roofIsa, threads});
        for (Isa isa : paths) adamStep(h, s, {isa, threads}), ++h.step;
        if (torch) torch->step(threads);
        std::vector<double> roof, torchTimes;
        std::vector<std::vector<double>> perPath(paths.size());
        for (int k = 0; k < o.steps; ++k) {
          roof.push_back(timeOnce([&] { adamRoofline(s, 0, n, {roofIsa, threads}); }));
          for (std::size_t i = 0; i < paths.size(); ++i) {
            perPath[i].push_back(timeOnce([&] { adamStep(h, s, {paths[i], threads}); }));
            ++h.step;
          }
          if (torch) torchTimes.push_back(torch->step(threads));
        }
        for (std::size_t i = 0; i < paths.size(); ++i) {
          std::vector<double> ratios;
          for (std::size_t k = 0; k < roof.size(); ++k) ratios.push_back(roof[k] / perPath[i][k]);
          Row r{std::string(nameOf(paths[i])), n, threads, median(perPath[i]), median(roof),
                median(ratios), std::nullopt,
                *std::min_element(perPath[i].begin(), perPath[i].end()),
                *std::min_element(roof.begin(), roof.end()), std::nullopt};
          if (torch) {
            r.torchSeconds = median(torchTimes);
            r.bestTorchSeconds = *std::min_element(torchTimes.begin(), torchTimes.end());
          }
          sizeRows.push_back(r);
        }
      }
    }
    rows.insert(rows.end(), sizeRows.begin(), sizeRows.end());
  }

  if (o.json) {
    for (const Row& r : rows) {
      const double bytes = static_cast<double>(bytesPerParam) * static_cast<double>(r.params);
      nlohmann::ordered_json j;
      j["optimizer"] = o.optimizer;
      j["path"] = r.path;
      j["params"] = r.params;
      j["threads"] = r.threads;
      j["grad_dtype"] = o.gradType;
      j["copy"] = o.copy;
      j["bytes_per_param"] = bytesPerParam;
      j["seconds_per_step"] = r.seconds;
      j["params_per_s"] = static_cast<double>(r.params) / r.seconds;
      j["gbps"] = bytes / r.seconds / 1e9;
      j["roofline_gbps"] = bytes / r.rooflineSeconds / 1e9;
      j["roofline_fraction"] = r.rooflineSeconds / r.seconds;  // = gbps / roofline_gbps
      j["paired_roofline_fraction"] = r.pairedRooflineFraction;
      j["torch_seconds_per_step"] =
          r.torchSeconds ? nlohmann::ordered_json(*r.torchSeconds) : nullptr;
      j["speedup_vs_torch"] =
          r.torchSeconds ? nlohmann::ordered_json(*r.torchSeconds / r.seconds) : nullptr;
      j["best_seconds_per_step"] = r.bestSeconds;
      j["best_roofline_fraction"] = r.bestRooflineSeconds / r.bestSeconds;
      j["best_torch_seconds_per_step"] =
          r.bestTorchSeconds ? nlohmann::ordered_json(*r.bestTorchSeconds) : nullptr;
      j["torch_version"] = torchVersion.empty() ? nlohmann::ordered_json(nullptr)
                                                : nlohmann::ordered_json(torchVersion);
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  std::printf(
      "zrt-optim-bench: %s, grad %s, copy %s, %zu bytes/param moved, median of %d turns; "
      "torch %s %s(foreach=True), fp32 grads, timed in the same turns\n",
      o.optimizer.c_str(), o.gradType.c_str(), o.copy.c_str(), bytesPerParam, o.steps,
      o.torch ? torchVersion.c_str() : "(not run)", o.optimizer == "adamw" ? "AdamW" : "Adam");
  const std::string copyWrite = copy ? " and the " + o.copy + " copy" : "";
  std::printf(
      "roofline kernel (%s, no arithmetic): reads param, exp_avg, exp_avg_sq (fp32, 12 B) and "
      "grad (%s, %zu B) = %zu B/param; writes param, exp_avg, exp_avg_sq (12 B)%s = %zu B/param; "
      "of roof = GB/s / roof GB/s (medians)\n",
      std::string(nameOf(roofIsa)).c_str(), o.gradType.c_str(), dtypeSize(gradType),
      12 + dtypeSize(gradType), copyWrite.c_str(),
      12 + (copy ? dtypeSize(copyType) : 0));
  std::printf("%-7s %11s %7s %10s %9s %7s %9s %8s %10s %8s\n", "path", "params", "threads",
              "s/step", "Gparam/s", "GB/s", "roof GB/s", "of roof", "torch s", "vs torch");
  for (const Row& r : rows) {
    const double bytes = static_cast<double>(bytesPerParam) * static_cast<double>(r.params);
    char torchCol[32] = "-", speedCol[32] = "-";
    if (r.torchSeconds) {
      std::snprintf(torchCol, sizeof torchCol, "%.4f", *r.torchSeconds);
      std::snprintf(speedCol, sizeof speedCol, "%.2fx", *r.torchSeconds / r.seconds);
    }
    std::printf("%-7s %11zu %7d %10.4f %9.3f %7.2f %9.2f %8.3f %10s %8s\n", r.path.c_str(),
                r.params, r.threads, r.seconds, static_cast<double>(r.params) / r.seconds / 1e9,
                bytes / r.seconds / 1e9, bytes / r.rooflineSeconds / 1e9, r.rooflineSeconds / r.seconds,
                torchCol, speedCol);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Times the CPU Adam/AdamW step per SIMD path against a roofline kernel and "
      "torch.optim's AdamW(foreach=True) in the same run"};
  Options o;
  app.add_option("--params", o.params, "parameter counts (K/M/G are binary: 64M = 2^26)")
      ->delimiter(',');
  app.add_option("--threads", o.threads, "thread counts")->delimiter(',');
  app.add_option("--paths", o.paths,
                 "paths to time: avx512, avx2, scalar (default: every SIMD path)")
      ->delimiter(',');
  app.add_option("--optimizer", o.optimizer, "adam or adamw");
  app.add_option("--grad-dtype", o.gradType, "gradient dtype: fp32, fp16 or bf16");
  app.add_option("--copy", o.copy, "parameter copy written in the same pass: none, fp16, bf16");
  app.add_option("--steps", o.steps, "timed steps per measurement (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("!--no-torch", o.torch, "skip the torch comparison");
  app.add_option("--python", o.python, "interpreter with torch");
  app.add_flag("--json", o.json, "one JSON object per line instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(o);
  } catch (const zrt::InvalidArgument& e) {
    std::fprintf(stderr, "zrt-optim-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-optim-bench: %s\n", e.what());
    return 1;
  }
}
