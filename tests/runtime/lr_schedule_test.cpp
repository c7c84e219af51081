// LrSchedule against DeepSpeed 0.19.8's WarmupLR, WarmupDecayLR and WarmupCosineLR as its engine
// applies them (scheduler built with last_batch_iteration -1, stepped after every optimizer
// step), three ways:
//   - a float64 formula written out here from DeepSpeed's definitions (dsLr below), compared
//     bit for bit, at steps 0, 1, warmup-1, warmup, warmup+1, mid-decay, total and beyond, for
//     warmup_type log and linear;
//   - values worked out by hand (in the comments), compared to 1e-9 relative;
//   - values printed by DeepSpeed 0.19.8's lr_schedules.py itself (a torch SGD optimizer,
//     reading param_groups[0]['lr'] before each scheduler.step(), printed with %.17g),
//     compared bit for bit.
#include "runtime/lr_schedule.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/error.h"

using namespace zrt;

namespace {

// DeepSpeed's get_lr() at last_batch_iteration `it`, written from lr_schedules.py's definitions
// (WarmupLR._get_gamma, WarmupDecayLR._get_gamma, WarmupCosineLR.get_lr_ratio).
double dsLr(const SchedulerConfig& s, double baseLr, std::int64_t it) {
  const std::int64_t w = std::max<std::int64_t>(2, s.warmup_num_steps);  // max(2, warmup)
  const double invLog = 1.0 / std::log(static_cast<double>(w));
  const bool log = s.warmup_type == "log";
  auto warm = [&](std::int64_t i) {
    return log ? invLog * std::log(static_cast<double>(i + 1))
               : static_cast<double>(i) / static_cast<double>(w);
  };
  if (s.type == SchedulerType::WarmupCosineLR) {
    if (it < 0) return 0.0;
    double ratio;
    if (it < w) {
      ratio = s.warmup_min_ratio + warm(it) * (1.0 - s.warmup_min_ratio);
    } else {
      double realLast = static_cast<double>(it - w + 1);
      double realTotal = static_cast<double>(std::max<std::int64_t>(1, s.total_num_steps - w));
      double progress = std::min(1.0, realLast / realTotal);
      ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * ratio);
    }
    return baseLr * ratio;
  }
  if (it < 0) return s.warmup_min_lr;
  double gamma = 1.0;
  if (it < w)
    gamma = warm(it);
  else if (s.type == SchedulerType::WarmupDecayLR)
    gamma = std::max(0.0, static_cast<double>(s.total_num_steps - it) /
                              std::max(1.0, static_cast<double>(s.total_num_steps - w)));
  return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * gamma;
}

// The engine steps the scheduler after each optimizer step: step k runs at index k - 1.
double engineLr(const SchedulerConfig& s, double baseLr, std::int64_t step) {
  return dsLr(s, baseLr, step - 1);
}

SchedulerConfig warmupLr(const char* type) {
  SchedulerConfig s;
  s.type = SchedulerType::WarmupLR;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 0.01;
  s.warmup_num_steps = 10;
  s.warmup_type = type;
  return s;
}

SchedulerConfig warmupDecayLr(const char* type) {
  SchedulerConfig s;
  s.type = SchedulerType::WarmupDecayLR;
  s.warmup_min_lr = 0.001;
  s.warmup_max_lr = 0.01;
  s.warmup_num_steps = 10;
  s.total_num_steps = 30;
  s.warmup_type = type;
  return s;
}

SchedulerConfig warmupCosineLr(const char* type) {
  SchedulerConfig s;
  s.type = SchedulerType::WarmupCosineLR;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.1;
  s.warmup_num_steps = 10;
  s.total_num_steps = 30;
  s.warmup_type = type;
  return s;
}

// Steps 0, 1, 2, warmup-1, warmup, warmup+1, mid-decay, total, total+1 and far beyond, for
// warmup 10 and total 30.
const std::vector<std::int64_t> kSteps = {0, 1, 2, 9, 10, 11, 21, 30, 31, 45, 1000, 5000};

void checkAgainstFormula(const SchedulerConfig& s, double baseLr) {
  LrSchedule lr = LrSchedule::fromConfig(s, baseLr);
  for (std::int64_t step : kSteps) {
    CAPTURE(step);
    CHECK(lr.lrAt(step) == engineLr(s, baseLr, step));
  }
  for (std::int64_t step = 0; step < 200; ++step) {
    CAPTURE(step);
    REQUIRE(lr.lrAt(step) == engineLr(s, baseLr, step));
  }
}

using Golden = std::vector<std::pair<std::int64_t, double>>;

void checkGolden(const SchedulerConfig& s, double baseLr, const Golden& golden) {
  LrSchedule lr = LrSchedule::fromConfig(s, baseLr);
  for (const auto& point : golden) {
    const std::int64_t step = point.first;  // clang 14: CAPTURE's lambda cannot capture a binding
    const double value = point.second;
    CAPTURE(step);
    CHECK(lr.lrAt(step) == value);
  }
}

void checkHand(const LrSchedule& lr, std::int64_t step, double expected) {
  CAPTURE(step);
  CHECK(lr.lrAt(step) == doctest::Approx(expected).epsilon(1e-9));
}

}  // namespace

TEST_CASE("no scheduler: the optimizer's lr at every step") {
  LrSchedule lr = LrSchedule::fromConfig(SchedulerConfig{}, 3e-4);
  CHECK(lr.type() == SchedulerType::None);
  for (std::int64_t step : kSteps) CHECK(lr.lrAt(step) == 3e-4);
}

TEST_CASE("WarmupLR matches DeepSpeed's formula, by hand and DeepSpeed's own values") {
  for (const char* type : {"log", "linear"}) {
    CAPTURE(type);
    checkAgainstFormula(warmupLr(type), 0.5);
  }
  // min 0, max 0.01, W 10. The base lr plays no part (DeepSpeed overwrites the optimizer's lr).
  // log: step 0 is index -1 (min); step k index k-1: 0.01 * ln(k) / ln(10).
  LrSchedule lg = LrSchedule::fromConfig(warmupLr("log"), 0.5);
  checkHand(lg, 0, 0.0);
  checkHand(lg, 1, 0.0);                 // ln 1 = 0
  checkHand(lg, 2, 0.0030102999566398);  // log10(2) = 0.30103
  checkHand(lg, 9, 0.0095424250943932);  // log10(9) = 0.954243
  checkHand(lg, 10, 0.01);               // log10(10) = 1 (1 ulp under in float64)
  checkHand(lg, 11, 0.01);               // index 10 >= W: max
  checkHand(lg, 5000, 0.01);
  // linear: 0.01 * (k-1) / 10.
  LrSchedule ln = LrSchedule::fromConfig(warmupLr("linear"), 0.5);
  checkHand(ln, 0, 0.0);
  checkHand(ln, 1, 0.0);
  checkHand(ln, 2, 0.001);
  checkHand(ln, 9, 0.008);
  checkHand(ln, 10, 0.009);  // the warmup never reaches max itself: index 9 is 9/10
  checkHand(ln, 11, 0.01);   // index 10: max
  checkGolden(warmupLr("log"), 0.5,
              {{0, 0},
               {1, 0},
               {2, 0.0030102999566398113},
               {9, 0.0095424250943932486},
               {10, 0.0099999999999999985},
               {11, 0.01},
               {5000, 0.01}});
  checkGolden(warmupLr("linear"), 0.5,
              {{0, 0},
               {1, 0},
               {2, 0.001},
               {9, 0.0080000000000000002},
               {10, 0.0090000000000000011},
               {11, 0.01},
               {5000, 0.01}});
}

TEST_CASE("WarmupDecayLR matches DeepSpeed's formula, by hand and DeepSpeed's own values") {
  for (const char* type : {"log", "linear"}) {
    CAPTURE(type);
    checkAgainstFormula(warmupDecayLr(type), 0.5);
  }
  // min 0.001, max 0.01 (delta 0.009), W 10, T 30. After the warmup, index i:
  // gamma = (30 - i) / 20, so lr = 0.001 + 0.009 * (30 - i) / 20, reaching min at index 30.
  LrSchedule ln = LrSchedule::fromConfig(warmupDecayLr("linear"), 0.5);
  checkHand(ln, 0, 0.001);     // index -1: min
  checkHand(ln, 1, 0.001);     // index 0: gamma 0
  checkHand(ln, 9, 0.0082);    // index 8: 0.001 + 0.009 * 0.8
  checkHand(ln, 10, 0.0091);   // index 9: 0.001 + 0.009 * 0.9
  checkHand(ln, 11, 0.01);     // index 10: (30 - 10) / 20 = 1
  checkHand(ln, 21, 0.0055);   // index 20: 0.001 + 0.009 * 0.5, mid-decay
  checkHand(ln, 30, 0.00145);  // index 29: 0.001 + 0.009 / 20; min only at step total + 1
  checkHand(ln, 31, 0.001);    // index 30: gamma 0: min (not 0)
  checkHand(ln, 5000, 0.001);  // max(0, negative): stays at min
  LrSchedule lg = LrSchedule::fromConfig(warmupDecayLr("log"), 0.5);
  checkHand(lg, 9, 0.001 + 0.009 * std::log10(9.0));  // 0.0095882
  checkHand(lg, 10, 0.01);
  checkHand(lg, 21, 0.0055);  // the decay does not depend on warmup_type
  checkGolden(warmupDecayLr("log"), 0.5,
              {{0, 0.001},
               {1, 0.001},
               {2, 0.0037092699609758304},
               {9, 0.0095881825849539228},
               {10, 0.0099999999999999985},
               {11, 0.010000000000000002},
               {21, 0.0055000000000000005},
               {30, 0.0014500000000000001},
               {31, 0.001},
               {5000, 0.001}});
  checkGolden(warmupDecayLr("linear"), 0.5,
              {{0, 0.001},
               {1, 0.001},
               {2, 0.0019000000000000002},
               {9, 0.0082000000000000024},
               {10, 0.0091000000000000004},
               {11, 0.010000000000000002},
               {21, 0.0055000000000000005},
               {30, 0.0014500000000000001},
               {31, 0.001},
               {5000, 0.001}});
}

TEST_CASE("WarmupCosineLR matches DeepSpeed's formula, by hand and DeepSpeed's own values") {
  for (const char* type : {"log", "linear"}) {
    CAPTURE(type);
    checkAgainstFormula(warmupCosineLr(type), 0.01);
    checkAgainstFormula(warmupCosineLr(type), 3e-4);
  }
  // base 0.01, warmup_min_ratio 0.1, cos_min_ratio 0.1, W 10, T 30. Step 0 runs at 0 (get_lr
  // before the first scheduler step), not at warmup_min_ratio; index i >= 10:
  // p = (i - 9) / 20, ratio = 0.1 + 0.9 * (1 + cos(pi p)) / 2.
  LrSchedule ln = LrSchedule::fromConfig(warmupCosineLr("linear"), 0.01);
  checkHand(ln, 0, 0.0);
  checkHand(ln, 1, 0.001);    // index 0: ratio 0.1
  checkHand(ln, 9, 0.0082);   // index 8: 0.1 + 0.9 * 0.8 = 0.82
  checkHand(ln, 10, 0.0091);  // index 9: 0.91
  // index 10: p = 0.05, cos(0.05 pi) = 0.98768834, ratio = 0.1 + 0.9 * 0.99384417 = 0.99445975
  checkHand(ln, 11, 0.0099445975326781);
  // index 20, mid-decay: p = 0.55, cos(0.55 pi) = -0.15643447, ratio = 0.1 + 0.9 * 0.42178277
  checkHand(ln, 21, 0.0047960449073190);
  checkHand(ln, 30, 0.001);  // index 29: p = 1: cos_min_ratio, reached at step total
  checkHand(ln, 31, 0.001);  // p clamped to 1: stays at the floor
  checkHand(ln, 5000, 0.001);
  LrSchedule lg = LrSchedule::fromConfig(warmupCosineLr("log"), 0.01);
  checkHand(lg, 2, 0.01 * (0.1 + 0.9 * std::log10(2.0)));
  checkHand(lg, 10, 0.01);  // index 9: ln 10 / ln 10 = 1
  checkHand(lg, 11, 0.0099445975326781);
  checkGolden(warmupCosineLr("log"), 0.01,
              {{0, 0},
               {1, 0.001},
               {2, 0.0037092699609758309},
               {9, 0.0095881825849539228},
               {10, 0.0099999999999999985},
               {11, 0.0099445975326781198},
               {21, 0.0047960449073189606},
               {30, 0.001},
               {31, 0.001},
               {5000, 0.001}});
  checkGolden(warmupCosineLr("linear"), 0.01,
              {{0, 0},
               {1, 0.001},
               {2, 0.0019},
               {9, 0.0082000000000000007},
               {10, 0.0091000000000000004},
               {11, 0.0099445975326781198},
               {21, 0.0047960449073189606},
               {30, 0.001},
               {31, 0.001},
               {5000, 0.001}});
}

TEST_CASE("WarmupCosineLR with DeepSpeed's defaults, read from a config") {
  Config c = parseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000,
      "warmup_num_steps": 100}}})",
                         "test.json", 1, {});
  LrSchedule lr = LrSchedule::fromConfig(c.scheduler, c.optimizer.lr);
  CHECK(lr.type() == SchedulerType::WarmupCosineLR);
  // warmup_min_ratio 0, cos_min_ratio 1e-4, log warmup; DeepSpeed's own values.
  const Golden golden = {{0, 0},
                         {1, 0},
                         {2, 4.5154499349597169e-05},
                         {99, 0.00029934527918963237},
                         {100, 0.00029999999999999992},
                         {101, 0.00029999908624005368},
                         {550, 0.00015001499999999998},
                         {1000, 2.9999999999999997e-08},
                         {1001, 2.9999999999999997e-08},
                         {5000, 2.9999999999999997e-08}};
  for (const auto& point : golden) {
    const std::int64_t step = point.first;  // clang 14: CAPTURE's lambda cannot capture a binding
    const double value = point.second;
    CAPTURE(step);
    CHECK(lr.lrAt(step) == value);
    CHECK(lr.lrAt(step) == engineLr(c.scheduler, 3e-4, step));
  }
  // Mid-decay by hand: step 550 is index 549, p = 450 / 900 = 0.5, cos = 0:
  // ratio = 1e-4 + (1 - 1e-4) / 2 = 0.50005, lr = 1.50015e-4. Floor: 3e-4 * 1e-4 = 3e-8.
  checkHand(lr, 550, 1.50015e-4);
  checkHand(lr, 1000, 3e-8);
}

TEST_CASE("warmup_num_steps 1 acts as 2, as in DeepSpeed") {
  SchedulerConfig s = warmupDecayLr("log");
  s.warmup_num_steps = 1;
  s.total_num_steps = 5;
  checkAgainstFormula(s, 0.5);
  // W = 2: index 0 gamma 0, index 1 gamma ln 2 / ln 2 = 1; then (5 - i) / 3.
  checkGolden(s, 0.5, {{0, 0.001}, {1, 0.001}, {2, 0.010000000000000002}, {9, 0.001}});
}

TEST_CASE("values no schedule can run with are errors naming the key") {
  SchedulerConfig decay = warmupDecayLr("linear");
  decay.total_num_steps = 0;  // "auto" left to a trainer that never set it
  CHECK_THROWS_WITH_AS(LrSchedule::fromConfig(decay, 1e-3),
                       doctest::Contains("scheduler.params.total_num_steps is 0"), InvalidArgument);
  SchedulerConfig cosine = warmupCosineLr("log");
  cosine.total_num_steps = 0;
  CHECK_THROWS_WITH_AS(LrSchedule::fromConfig(cosine, 1e-3),
                       doctest::Contains("WarmupCosineLR needs the number of steps"),
                       InvalidArgument);
  SchedulerConfig warm = warmupLr("log");
  warm.total_num_steps = 0;  // WarmupLR does not need it
  CHECK_NOTHROW(LrSchedule::fromConfig(warm, 1e-3));
  warm.warmup_num_steps = 0;
  CHECK_THROWS_WITH_AS(LrSchedule::fromConfig(warm, 1e-3),
                       doctest::Contains("scheduler.params.warmup_num_steps"), InvalidArgument);
  warm.warmup_num_steps = 10;
  warm.warmup_type = "cosine";
  CHECK_THROWS_WITH_AS(LrSchedule::fromConfig(warm, 1e-3),
                       doctest::Contains("scheduler.params.warmup_type"), InvalidArgument);
  cosine.total_num_steps = 30;
  cosine.cos_min_ratio = 1.5;
  CHECK_THROWS_WITH_AS(LrSchedule::fromConfig(cosine, 1e-3),
                       doctest::Contains("scheduler.params.cos_min_ratio"), InvalidArgument);
  CHECK_THROWS_AS(LrSchedule::fromConfig(SchedulerConfig{}, -1.0), InvalidArgument);
  CHECK_THROWS_AS(LrSchedule::fromConfig(SchedulerConfig{}, 1e-3).lrAt(-1), InvalidArgument);
}
