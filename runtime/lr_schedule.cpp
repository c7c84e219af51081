// DeepSpeed 0.19.8's WarmupLR, WarmupDecayLR and WarmupCosineLR (lr_schedules.py), evaluated in
// the same float64 operations in the same order, so the values match DeepSpeed's bit for bit
// where the C library's log and cos match Python's (both call the platform's libm).
#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace zrt {

LrSchedule LrSchedule::fromConfig(const SchedulerConfig& s, double baseLr) {
  if (!std::isfinite(baseLr) || baseLr < 0)
    ZRT_THROW(InvalidArgument, "the optimizer's lr must be finite and >= 0, got ", baseLr);
  LrSchedule r;
  r.type_ = s.type;
  r.baseLr_ = baseLr;
  if (s.type == SchedulerType::None) return r;

  if (s.warmup_num_steps < 1)
    ZRT_THROW(InvalidArgument,
              "scheduler.params.warmup_num_steps must be a positive integer (DeepSpeed raises "
              "ValueError too), got ",
              s.warmup_num_steps);
  if (s.warmup_type != "log" && s.warmup_type != "linear")
    ZRT_THROW(InvalidArgument, "scheduler.params.warmup_type must be log or linear, got \"",
              s.warmup_type, "\"");
  if (s.type != SchedulerType::WarmupLR && s.total_num_steps < 1)
    ZRT_THROW(InvalidArgument, "scheduler.params.total_num_steps is ", s.total_num_steps,
              " (\"auto\" not resolved?); ", nameOf(s.type),
              " needs the number of steps to decay over: set it before building the schedule");
  if (s.type == SchedulerType::WarmupCosineLR) {
    if (!(s.warmup_min_ratio >= 0 && s.warmup_min_ratio <= 1))
      ZRT_THROW(InvalidArgument, "scheduler.params.warmup_min_ratio must be in [0, 1], got ",
                s.warmup_min_ratio);
    if (!(s.cos_min_ratio >= 0 && s.cos_min_ratio <= 1))
      ZRT_THROW(InvalidArgument, "scheduler.params.cos_min_ratio must be in [0, 1], got ",
                s.cos_min_ratio);
  } else if (!std::isfinite(s.warmup_min_lr) || !std::isfinite(s.warmup_max_lr) ||
             s.warmup_min_lr < 0 || s.warmup_max_lr < 0) {
    ZRT_THROW(InvalidArgument,
              "scheduler.params.warmup_min_lr and warmup_max_lr must be finite and >= 0, got ",
              s.warmup_min_lr, " and ", s.warmup_max_lr);
  }

  r.minLr_ = s.warmup_min_lr;
  r.maxLr_ = s.warmup_max_lr;
  r.warmupMinRatio_ = s.warmup_min_ratio;
  r.cosMinRatio_ = s.cos_min_ratio;
  r.warmup_ = std::max<std::int64_t>(2, s.warmup_num_steps);
  r.total_ = s.total_num_steps;
  r.logWarmup_ = s.warmup_type == "log";
  r.inverseLogWarmup_ = 1.0 / std::log(static_cast<double>(r.warmup_));
  return r;
}

double LrSchedule::lrAt(std::int64_t step) const {
  if (step < 0) ZRT_THROW(InvalidArgument, "optimizer step must be >= 0, got ", step);
  if (type_ == SchedulerType::None) return baseLr_;
  // The scheduler is stepped after each optimizer step, so step k runs at index k - 1.
  return lrOfIndex(step - 1);
}

double LrSchedule::warmupGamma(std::int64_t index) const {
  if (logWarmup_) return inverseLogWarmup_ * std::log(static_cast<double>(index + 1));
  return static_cast<double>(index) / static_cast<double>(warmup_);
}

double LrSchedule::lrOfIndex(std::int64_t index) const {
  const auto i = static_cast<double>(index);
  switch (type_) {
    case SchedulerType::None:
      return baseLr_;
    case SchedulerType::WarmupLR:
    case SchedulerType::WarmupDecayLR: {
      if (index < 0) return minLr_;  // get_lr() before the first scheduler step
      const double delta = maxLr_ - minLr_;
      double gamma = 1.0;
      if (index < warmup_)
        gamma = warmupGamma(index);
      else if (type_ == SchedulerType::WarmupDecayLR)
        gamma = std::max(0.0, static_cast<double>(total_ - index) /
                                  std::max(1.0, static_cast<double>(total_ - warmup_)));
      return minLr_ + delta * gamma;
    }
    case SchedulerType::WarmupCosineLR: {
      if (index < 0) return baseLr_ * 0.0;  // get_lr() returns 0 before it has started
      double ratio = 0.0;
      if (index < warmup_) {
        ratio = warmupMinRatio_ + warmupGamma(index) * (1.0 - warmupMinRatio_);
      } else {
        const double realLastStep = i - static_cast<double>(warmup_) + 1.0;
        const double realTotalSteps =
            static_cast<double>(std::max<std::int64_t>(1, total_ - warmup_));
        const double progress = std::min(1.0, realLastStep / realTotalSteps);
        const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
        ratio = std::max(0.0, cosMinRatio_ + (1.0 - cosMinRatio_) * cosine);
      }
      return baseLr_ * ratio;
    }
  }
  return baseLr_;
}

}  // namespace zrt
