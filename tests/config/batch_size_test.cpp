// Batch-size resolution: every combination of given and missing values, contradictions, the
// caller's values, and a sweep checking the result against the defining equation.
#include "core/config/batch_size.h"

#include <doctest/doctest.h>

#include <array>

#include "tests/config/config_test_util.h"

using namespace zrt;
using zrt::test::configErrorOf;
using zrt::test::contains;

namespace {

BatchSetting file(std::int64_t v) { return {v, false, std::nullopt}; }
BatchSetting none() { return {}; }
BatchSetting autoValue() { return {std::nullopt, true, std::nullopt}; }
BatchSetting caller(std::int64_t v, bool fileAuto = true) { return {std::nullopt, fileAuto, v}; }

BatchSizes resolve(BatchSetting t, BatchSetting m, BatchSetting a, int world) {
  return resolveBatchSizes({t, m, a}, world, "b.json");
}

std::string errorOf(BatchSetting t, BatchSetting m, BatchSetting a, int world) {
  try {
    resolve(t, m, a, world);
  } catch (const ConfigError& e) {
    CHECK(e.source() == "b.json");
    return e.what();
  }
  FAIL_CHECK("resolved");
  return "";
}

void checkSizes(const BatchSizes& b, std::int64_t train, std::int64_t micro, std::int64_t accum) {
  CHECK(b.train == train);
  CHECK(b.micro == micro);
  CHECK(b.accum == accum);
}

}  // namespace

TEST_CASE("any two of train batch, micro-batch and accumulation determine the third") {
  checkSizes(resolve(file(32), file(4), file(2), 4), 32, 4, 2);  // all three, consistent
  checkSizes(resolve(file(32), file(4), none(), 4), 32, 4, 2);   // accumulation derived
  checkSizes(resolve(file(32), none(), file(2), 4), 32, 4, 2);   // micro-batch derived
  checkSizes(resolve(none(), file(4), file(2), 4), 32, 4, 2);    // train batch derived
  checkSizes(resolve(file(32), none(), none(), 4), 32, 8, 1);    // train only: no accumulation
  checkSizes(resolve(none(), file(4), none(), 4), 16, 4, 1);     // micro only: no accumulation
  checkSizes(resolve(none(), none(), file(3), 4), 12, 1, 3);     // accumulation only: micro 1
  checkSizes(resolve(none(), none(), none(), 4), 4, 1, 1);       // nothing: micro 1
  checkSizes(resolve(autoValue(), autoValue(), autoValue(), 2), 2, 1, 1);
}

TEST_CASE("a contradiction prints all three values and the world size") {
  std::string e = errorOf(file(32), file(4), file(3), 4);
  CHECK(contains(
      e,
      "b.json: train_batch_size: batch sizes contradict: train_batch_size 32 != "
      "train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 3 * world size 4 = 48"));
  // Derived values are rounded down as DeepSpeed does, then checked.
  e = errorOf(file(30), file(4), none(), 4);
  CHECK(contains(e,
                 "train_batch_size 30 != train_micro_batch_size_per_gpu 4 * "
                 "gradient_accumulation_steps 1 * world size 4 = 16"));
  CHECK(contains(e, "gradient_accumulation_steps was derived as 30 / 4 / 4"));
  e = errorOf(file(30), none(), none(), 4);
  CHECK(contains(e,
                 "train_batch_size 30 != train_micro_batch_size_per_gpu 7 * "
                 "gradient_accumulation_steps 1 * world size 4 = 28"));
  e = errorOf(file(2), none(), none(), 4);  // fewer samples than ranks
  CHECK(contains(e, "train_micro_batch_size_per_gpu 0"));
  e = errorOf(file(8), file(4), none(), 4);  // accumulation would be 0
  CHECK(contains(e, "gradient_accumulation_steps 0"));
  e = errorOf(file(12), none(), file(5), 2);
  CHECK(contains(e,
                 "train_batch_size 12 != train_micro_batch_size_per_gpu 1 * "
                 "gradient_accumulation_steps 5 * world size 2 = 10"));
}

TEST_CASE("the caller fills values the file leaves auto or absent, never numbers it gives") {
  checkSizes(resolve(autoValue(), caller(4), caller(2), 4), 32, 4, 2);
  checkSizes(resolve(caller(64), autoValue(), caller(2, false), 4), 64, 8, 2);
  checkSizes(resolve(file(32), caller(4), none(), 4), 32, 4, 2);
  // The caller agreeing with the file is fine; disagreeing is an error.
  checkSizes(resolve(file(32), BatchSetting{4, false, 4}, none(), 4), 32, 4, 2);
  std::string e = errorOf(file(32), BatchSetting{4, false, 8}, none(), 4);
  CHECK(contains(e, "train_micro_batch_size_per_gpu: the file gives 4 but the caller asks for 8"));
  // The caller's values must agree with each other too.
  e = errorOf(caller(10), caller(4), caller(2), 4);
  CHECK(contains(e,
                 "batch sizes contradict: train_batch_size 10 != train_micro_batch_size_per_gpu 4 "
                 "* gradient_accumulation_steps 2 * world size 4 = 32"));
}

TEST_CASE("notes say where each value came from") {
  BatchSizes b = resolve(autoValue(), caller(4), none(), 2);
  std::string notes;
  for (const auto& n : b.notes) notes += n + "\n";
  CHECK(contains(notes, "train_micro_batch_size_per_gpu: \"auto\" -> 4 (from the caller)"));
  CHECK(contains(notes,
                 "gradient_accumulation_steps: absent -> 1 (no accumulation, as DeepSpeed does)"));
  CHECK(contains(notes, "train_batch_size: \"auto\" -> 8 (derived: 4 * 2)"));
}

TEST_CASE(
    "sweep: results satisfy the equation, keep given values, and fail only without a solution") {
  // For every subset of given values (1..6) and world sizes 1..4: a result must satisfy
  // train = micro * accum * world and keep every given value; an error is right only when no
  // integer solution keeps the given values (DeepSpeed's rules fill the rest uniquely, with
  // accumulation 1 when only one of train/micro is given).
  for (int world = 1; world <= 4; ++world) {
    for (int mask = 0; mask < 8; ++mask) {
      for (std::int64_t t = 1; t <= 24; ++t) {
        for (std::int64_t m = 1; m <= 6; ++m) {
          for (std::int64_t a = 1; a <= 6; ++a) {
            bool hasT = mask & 1, hasM = mask & 2, hasA = mask & 4;
            if ((!hasT && t > 1) || (!hasM && m > 1) || (!hasA && a > 1)) continue;  // once each
            BatchSetting bt = hasT ? file(t) : none();
            BatchSetting bm = hasM ? file(m) : none();
            BatchSetting ba = hasA ? file(a) : none();
            // The solution DeepSpeed's rules pick, found by search.
            std::optional<std::array<std::int64_t, 3>> expected;
            std::int64_t defaultAccum = (hasT != hasM && !hasA) ? 1 : 0;
            for (std::int64_t mm = 1; mm <= 24 && !expected; ++mm)
              for (std::int64_t aa = 1; aa <= 24 && !expected; ++aa) {
                if (hasM && mm != m) continue;
                if (hasA && aa != a) continue;
                if (defaultAccum && aa != 1) continue;
                if (!hasT && !hasM && mm != 1) continue;
                std::int64_t tt = mm * aa * world;
                if (hasT && tt != t) continue;
                if (!hasT && !hasA && !hasM && aa != 1) continue;
                expected = std::array<std::int64_t, 3>{tt, mm, aa};
              }
            CAPTURE(world);
            CAPTURE(mask);
            CAPTURE(t);
            CAPTURE(m);
            CAPTURE(a);
            if (expected) {
              BatchSizes b = resolve(bt, bm, ba, world);
              CHECK(b.train == (*expected)[0]);
              CHECK(b.micro == (*expected)[1]);
              CHECK(b.accum == (*expected)[2]);
            } else {
              CHECK_THROWS_AS(resolve(bt, bm, ba, world), ConfigError);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("batch resolution through parseConfig, with the caller's overrides") {
  ConfigOverrides o;
  o.train_micro_batch_size_per_gpu = 2;
  Config c = parseConfig(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": "auto"})",
                         "x.json", 4, o);
  CHECK(c.gradient_accumulation_steps == 2);
  std::string e = configErrorOf(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
                                   "gradient_accumulation_steps": 4})",
                                4);
  CHECK(contains(
      e,
      "bad.json: train_batch_size: batch sizes contradict: train_batch_size 16 != "
      "train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 4 * world size 4 = 64"));
  ConfigOverrides zero;
  zero.gradient_accumulation_steps = 0;
  e = configErrorOf("{}", 1, zero);
  CHECK(contains(e, "gradient_accumulation_steps: the caller's value 0 must be >= 1"));
  e = configErrorOf("{}", 0);
  CHECK(contains(e, "world size 0 must be >= 1"));
}
