// LrSchedule: the learning rate of each optimizer step under the config's scheduler, with
// DeepSpeed's semantics (deepspeed/runtime/lr_schedules.py as of DeepSpeed 0.19.8: WarmupLR,
// WarmupDecayLR, WarmupCosineLR), so a run moved from DeepSpeed to ZRT sees the same lr at every
// step. It is a pure function of the step number rather than a stepped object, so resuming
// from a checkpoint needs only the count of optimizer steps taken.
// Thread-safety: plain immutable value; any number of threads may call lrAt() concurrently.
//
// Timing, as DeepSpeed's engine applies a scheduler: building it (last_batch_iteration -1)
// writes get_lr() at index -1 into the optimizer, and the engine calls scheduler.step() after
// every optimizer step that was not skipped for overflow. So the optimizer step numbered `step`
// (0-based, counting only steps taken) runs at the schedule's value for index step - 1:
//   step 0:  index -1: warmup_min_lr (WarmupLR, WarmupDecayLR); 0 (WarmupCosineLR, whose
//            get_lr() returns 0 before it has started, whatever warmup_min_ratio is);
//   step k:  index i = k - 1 >= 0, with W = max(2, warmup_num_steps), T = total_num_steps:
//     warmup gamma (i < W):  log: ln(i + 1) / ln(W);  linear: i / W
//     WarmupLR:        lr = min + (max - min) * (i < W ? gamma : 1)
//     WarmupDecayLR:   lr = min + (max - min) * (i < W ? gamma : max(0, (T - i) / max(1, T - W)))
//                      (so it decays to warmup_min_lr, reached at i = T)
//     WarmupCosineLR:  lr = baseLr * ratio;
//                      i < W:  ratio = warmup_min_ratio + gamma * (1 - warmup_min_ratio)
//                      else:   p = min(1, (i - W + 1) / max(1, T - W)),
//                              ratio = max(0, cos_min_ratio + (1 - cos_min_ratio)
//                                               * (1 + cos(pi * p)) / 2)
// So WarmupLR and WarmupDecayLR run steps 0 and 1 both at warmup_min_lr; WarmupCosineLR runs
// step 0 at 0 and step 1 at baseLr * warmup_min_ratio. The warmup's last value (index W - 1:
// gamma 1 up to rounding for log, (W - 1) / W for linear) is step W; from step W + 1 on,
// WarmupLR holds max, WarmupDecayLR starts its decay at max, and WarmupCosineLR's cosine is
// already one step in (p = 1 / (T - W)).
// Checked bit for bit against DeepSpeed 0.19.8's classes (tests/runtime/lr_schedule_test.cpp).
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace zrt {

class LrSchedule {
 public:
  // No scheduler: constant baseLr. Throws InvalidArgument naming the key (scheduler.params.*)
  // for a value no schedule can run with: total_num_steps 0 ("auto" left unresolved) where the
  // type needs it, warmup_num_steps 0 (DeepSpeed raises ValueError), an unknown warmup_type,
  // and a baseLr that is negative or not finite.
  static LrSchedule fromConfig(const SchedulerConfig& s, double baseLr);

  // The learning rate of optimizer step `step` (0-based: step 0 is the first optimizer step
  // taken; steps skipped for overflow do not count), as DeepSpeed's engine applies it.
  // Throws InvalidArgument for a negative step.
  double lrAt(std::int64_t step) const;

  SchedulerType type() const { return type_; }

 private:
  // DeepSpeed's get_lr() with last_batch_iteration = index (index >= -1).
  double lrOfIndex(std::int64_t index) const;
  // The warmup's gamma in [0, 1) for 0 <= index < warmup_.
  double warmupGamma(std::int64_t index) const;

  SchedulerType type_ = SchedulerType::None;
  double baseLr_ = 0.0;
  double minLr_ = 0.0;           // WarmupLR, WarmupDecayLR
  double maxLr_ = 0.0;           // WarmupLR, WarmupDecayLR
  double warmupMinRatio_ = 0.0;  // WarmupCosineLR
  double cosMinRatio_ = 0.0;     // WarmupCosineLR
  std::int64_t warmup_ = 2;      // max(2, warmup_num_steps), as DeepSpeed clamps it
  std::int64_t total_ = 0;       // WarmupDecayLR, WarmupCosineLR
  bool logWarmup_ = true;
  double inverseLogWarmup_ = 0.0;  // 1 / ln(warmup_), computed once as DeepSpeed does
};

}  // namespace zrt
