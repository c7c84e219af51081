// Against PyTorch: torch.optim.Adam, AdamW and SGD from Debian's python3-torch, driven by
// torch_reference.py on the same seeded gradients (written to a file). Final parameters and
// optimizer state must be bit-identical to torch's, element by element, on every CPU path, as
// docs/optim.md says: the kernels follow torch 1.13's CPU operation order, found by experiment
// against that version. Another torch may order its operations differently, so the test names
// the version it was tuned against (kTunedTorch) and fails, saying so, on any other; the
// relative difference is printed for elements that differ, to tell reordering from a bug.
// The learning rate changes every step and betas, eps and weight decay change mid-run.
// Without python3-torch the test fails with a message saying how to install it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/optim/adam.h"
#include "runtime/optim/isa.h"
#include "runtime/optim/sgd.h"
#include "tests/optim/compared_paths.h"
#include "tests/optim/optim_test_util.h"

using namespace zrt;
using namespace zrt::optim;
using namespace zrt::optim::test;
namespace fs = std::filesystem;

namespace {

// Debian's python3-torch (bookworm): torch.__version__ is "1.13.0a0". Any 1.13 is accepted.
constexpr std::string_view kTunedTorch = "1.13";

constexpr std::size_t kN = 12288;
constexpr int kSteps = 100;

struct Case {
  std::string optimizer;  // adam, adamw, sgd
  double weightDecay = 0;
  bool foreach = false;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  DType gradType = DType::F32;
};

struct StepHyper {
  double lr, beta1, beta2, eps, wd, momentum, dampening;
};

StepHyper hyperAt(const Case& c, int step) {
  StepHyper h{};
  h.lr = (c.optimizer == "sgd" ? 1e-2 : 1e-3) * (1.0 + 0.5 * std::sin(0.3 * step));
  h.beta1 = step <= 50 ? 0.9 : 0.85;
  h.beta2 = step <= 50 ? 0.999 : 0.995;
  h.eps = step <= 70 ? 1e-8 : 1e-6;
  h.wd = step <= 60 ? c.weightDecay : 2 * c.weightDecay;
  h.momentum = c.momentum;
  h.dampening = c.dampening;
  return h;
}

fs::path scratchDir() {
  fs::path d = fs::temp_directory_path() / ("zrt_optim_torch_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Every case the test cases below compare, in one list: torch runs them all in one interpreter
// (importing torch takes about a second; nine imports were most of this test's time).
const Case kCases[] = {
    {.optimizer = "adam"},
    {.optimizer = "adam", .weightDecay = 0.01},
    {.optimizer = "adamw", .weightDecay = 0.1},
    {.optimizer = "adamw", .weightDecay = 0.1, .foreach = true},
    {.optimizer = "adamw", .weightDecay = 0.1, .gradType = DType::F16},
    {.optimizer = "adamw", .weightDecay = 0.1, .gradType = DType::BF16},
    {.optimizer = "sgd", .weightDecay = 1e-3, .momentum = 0.9, .dampening = 0.1},
    {.optimizer = "sgd", .weightDecay = 1e-3, .momentum = 0.9, .nesterov = true},
    {.optimizer = "sgd"},
};
constexpr std::size_t kNumCases = sizeof kCases / sizeof kCases[0];

std::size_t arraysOf(const Case& c) {
  return c.optimizer == "sgd" ? (c.momentum != 0 ? 2 : 1) : 3;
}

std::vector<float> initialParams() { return randomFloats(kN, 21, 0.0f, 0.3f); }

std::vector<GradBuffer> gradsOf(const Case& c) {
  std::vector<GradBuffer> grads;
  for (int step = 1; step <= kSteps; ++step) {
    grads.push_back(randomGrads(c.gradType, kN, 500 + step, 0.02));
  }
  return grads;
}

// Writes case c's data (p0 and the gradients, as exact floats) and META file under dir; returns
// the META file's path.
fs::path writeCase(const Case& c, const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path data = dir / "data.f32", meta = dir / "meta.json";
  {
    std::vector<float> all(initialParams());
    for (const auto& g : gradsOf(c)) {
      for (std::size_t i = 0; i < kN; ++i) all.push_back(static_cast<float>(g.value(i)));
    }
    std::ofstream f(data, std::ios::binary);
    f.write(reinterpret_cast<const char*>(all.data()),
            static_cast<std::streamsize>(all.size() * sizeof(float)));
    REQUIRE(f.good());
  }
  nlohmann::json j;
  j["optimizer"] = c.optimizer;
  j["n"] = kN;
  j["steps"] = kSteps;
  j["foreach"] = c.foreach;
  j["data"] = data.string();
  j["out"] = (dir / "out.f32").string();
  j["version_out"] = (dir / "torch_version.txt").string();
  for (int step = 1; step <= kSteps; ++step) {
    const StepHyper h = hyperAt(c, step);
    nlohmann::json s;
    s["lr"] = h.lr;
    s["weight_decay"] = h.wd;
    if (c.optimizer == "sgd") {
      s["momentum"] = h.momentum;
      s["dampening"] = h.dampening;
      s["nesterov"] = c.nesterov;
    } else {
      s["betas"] = {h.beta1, h.beta2};
      s["eps"] = h.eps;
    }
    j["hyper"].push_back(s);
  }
  std::ofstream(meta) << j.dump();
  return meta;
}

// Runs torch once on every case of kCases; returns each case's output arrays.
std::vector<std::vector<float>> runTorch() {
  const fs::path dir = scratchDir();
  std::string cmd = std::string(ZRT_TORCH_PYTHON) + " " + ZRT_TORCH_SCRIPT;
  for (std::size_t k = 0; k < kNumCases; ++k) {
    cmd += " " + writeCase(kCases[k], dir / ("case" + std::to_string(k))).string();
  }
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    fs::remove_all(dir);
    FAIL("`" << cmd << "` failed (status " << rc
             << "). This test needs Debian's python3-torch "
                "at " ZRT_TORCH_PYTHON ": run scripts/install-deps.sh");
  }
  std::vector<std::vector<float>> results;
  for (std::size_t k = 0; k < kNumCases; ++k) {
    const fs::path caseDir = dir / ("case" + std::to_string(k));
    std::string torchVersion;
    std::getline(std::ifstream(caseDir / "torch_version.txt"), torchVersion);
    const bool tuned = torchVersion == kTunedTorch ||
                       torchVersion.rfind(std::string(kTunedTorch) + ".", 0) == 0;
    if (!tuned) {
      fs::remove_all(dir);
      FAIL(ZRT_TORCH_PYTHON " runs torch "
           << (torchVersion.empty() ? "(no version written)" : torchVersion)
           << ", but this test was tuned against torch " << std::string(kTunedTorch)
           << " (Debian's python3-torch): its bit-for-bit comparison holds for that version's "
              "operation order only. Point ZRT_TORCH_PYTHON at a torch "
           << std::string(kTunedTorch) << ", or re-tune the kernels and kTunedTorch together");
    }
    const std::size_t outArrays = arraysOf(kCases[k]);
    std::vector<float> result(kN * outArrays);
    std::ifstream f(caseDir / "out.f32", std::ios::binary);
    f.read(reinterpret_cast<char*>(result.data()),
           static_cast<std::streamsize>(result.size() * sizeof(float)));
    const bool complete =
        f.gcount() == static_cast<std::streamsize>(result.size() * sizeof(float));
    if (!complete) fs::remove_all(dir);
    REQUIRE_MESSAGE(complete, "torch wrote fewer than " << outArrays << " arrays of " << kN);
    results.push_back(std::move(result));
  }
  fs::remove_all(dir);
  return results;
}

// Torch's output for kCases[k]; torch runs (all cases) the first time this is called.
const std::vector<float>& torchResult(std::size_t k) {
  static std::vector<std::vector<float>> results;
  if (results.empty()) results = runTorch();
  return results[k];
}

// Bit for bit: the first differing element is shown with both bit patterns.
void compare(const char* name, const float* ours, const float* torch) {
  std::size_t identical = 0;
  double worst = 0;
  bool shown = false;
  for (std::size_t i = 0; i < kN; ++i) {
    const auto a = std::bit_cast<std::uint32_t>(ours[i]);
    const auto b = std::bit_cast<std::uint32_t>(torch[i]);
    if (a == b) {
      ++identical;
      continue;
    }
    worst = std::max(worst, std::abs(double(ours[i]) - torch[i]) / std::abs(double(torch[i])));
    if (!shown) {
      shown = true;
      char line[160];
      std::snprintf(line, sizeof line, "%s element %zu: %.9g (0x%08x) vs torch %.9g (0x%08x)",
                    name, i, ours[i], a, torch[i], b);
      MESSAGE(line);
    }
  }
  if (identical == kN) {
    MESSAGE("  " << std::string(name) << ": " << kN << "/" << kN << " bit-identical");
  } else {
    MESSAGE("  " << std::string(name) << ": " << identical << "/" << kN
                 << " bit-identical, worst relative difference " << worst);
  }
  CHECK_MESSAGE(identical == kN, std::string(name) << ": " << kN - identical << " of " << kN
                                      << " elements are not bit-identical to torch's");
}

void runCase(std::size_t k) {
  const Case& c = kCases[k];
  const std::vector<float> p0 = initialParams();
  const std::vector<GradBuffer> grads = gradsOf(c);
  const bool sgd = c.optimizer == "sgd";
  const std::size_t arrays = arraysOf(c);
  const std::vector<float>& want = torchResult(k);
  for (Isa isa : pathsToCompare()) {
    MESSAGE(c.optimizer << " wd " << c.weightDecay << " momentum " << c.momentum << " nesterov "
                        << c.nesterov << " foreach " << c.foreach << " grad " << nameOf(c.gradType)
                        << " path " << nameOf(isa));
    std::vector<float> p(p0), a(kN, 0.0f), b(kN, 0.0f);
    for (int step = 1; step <= kSteps; ++step) {
      const StepHyper h = hyperAt(c, step);
      const GradBuffer& g = grads[static_cast<std::size_t>(step - 1)];
      if (sgd) {
        SgdHyper s;
        s.lr = h.lr;
        s.momentum = h.momentum;
        s.dampening = h.dampening;
        s.weightDecay = h.wd;
        s.nesterov = c.nesterov;
        s.step = step;
        sgdStep(s, SgdState{p.data(), a.data(), g.data(), g.type, nullptr, DType::F16, kN},
                {isa, 2});
      } else {
        AdamHyper ah;
        ah.lr = h.lr;
        ah.beta1 = h.beta1;
        ah.beta2 = h.beta2;
        ah.eps = h.eps;
        ah.weightDecay = h.wd;
        ah.decoupledWeightDecay = c.optimizer == "adamw";
        ah.step = step;
        adamStep(ah,
                 AdamState{p.data(), a.data(), b.data(), g.data(), g.type, nullptr, DType::F16, kN},
                 {isa, 2});
      }
    }
    compare("param", p.data(), want.data());
    if (arrays >= 2) compare(sgd ? "momentum_buffer" : "exp_avg", a.data(), want.data() + kN);
    if (arrays >= 3) compare("exp_avg_sq", b.data(), want.data() + 2 * kN);
  }
}

}  // namespace

TEST_CASE("torch.optim.Adam") {
  runCase(0);  // no weight decay
  runCase(1);  // weight decay 0.01
}

TEST_CASE("torch.optim.AdamW, every gradient dtype, single-tensor and foreach") {
  runCase(2);  // fp32 gradients
  runCase(3);  // foreach
  runCase(4);  // fp16 gradients
  runCase(5);  // bf16 gradients
}

TEST_CASE("torch.optim.SGD with momentum, dampening, weight decay and Nesterov") {
  runCase(6);  // momentum, dampening, weight decay
  runCase(7);  // Nesterov
  runCase(8);  // plain
}
