// The engine on N ranks at stages 0, 1, 2 and 3 ends on the parameters of one rank training the
// same global batches at stage 0 (the independent reference: no sharding, no bucketing, one
// micro-batch per step), for accumulation 1 and 3 and every precision.
//
// Tolerances, derived:
// - fp32 with Adam (L2 weight decay, so the gradient's scale matters, and clipping at a norm
//   the gradients exceed): the runs differ only in the order fp32 sums are taken (over ranks,
//   micro-batches, buckets), a few units of 2^-24 in each gradient; Adam maps a relative
//   gradient change δ to an update change of about δ·lr, so after 20 steps parameters agree to
//   well within 1e-6 of their size, which the test asserts.
// - fp16 / bf16 with SGD: the sharded run rounds each gradient up to three more times (the
//   micro-batch's gradient, the reduced sum, the average) than the reference (once), each by at
//   most u (2^-11 for fp16, 2^-8 for bf16) relative, and the parameters it reads may differ by
//   one rounding u·|θ|, which moves the gradient by at most u·|θ|·Lip with the model's
//   Lipschitz constant Lip ≤ 1 here (tanh' ≤ 1, |s| = 1, |W x| small). SGD turns a gradient
//   difference Δg into lr·Δg per step, so after S steps
//       |Δθ| ≤ S·lr·(3u·max|g| + u·max|θ|) + u·max|θ|   (the last term: the final rounding),
//   which the test computes from the reference run's own gradients and parameters.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_test_model.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

constexpr int kSteps = 20;
constexpr std::int64_t kMicro = 2;
constexpr double kSgdLr = 0.05;

std::string configText(int stage, std::int64_t micro, int accum, int world, DType dtype) {
  const bool sgd = dtype != DType::F32;
  std::string precision;
  if (dtype == DType::F16) precision = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
  if (dtype == DType::BF16) precision = R"("bf16": {"enabled": true},)";
  const std::string optimizer =
      sgd ? R"("optimizer": {"type": "SGD", "params": {"lr": 0.05}},)"
          : R"("optimizer": {"type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.01, "adam_w_mode": false}},
             "gradient_clipping": 0.05,)";
  return detail::cat(R"({"train_batch_size": )", micro * accum * world,
                     R"(, "train_micro_batch_size_per_gpu": )", micro,
                     R"(, "gradient_accumulation_steps": )", accum, ",", optimizer, precision,
                     R"("zero_optimization": {"stage": )", stage,
                     R"(, "reduce_bucket_size": 40, "allgather_bucket_size": 100, "overlap_comm": true)",
                     // Stage 3: no module stays whole (each has 80 elements), at most two are
                     // gathered at once, and one is gathered ahead.
                     R"(, "stage3_param_persistence_threshold": 10, "stage3_max_live_parameters": 160)",
                     R"(, "stage3_prefetch_bucket_size": 80, "stage3_max_reuse_distance": 0}})");
}

struct Run {
  std::vector<std::vector<float>> values;
  std::vector<StepReport> reports;
};

Run trainOn(comm::Communicator& comm, int stage, std::int64_t micro, int accum, DType dtype,
            const test::TrainHooks& hooks = {}) {
  const Config config = parseConfig(configText(stage, micro, accum, comm.size(), dtype), "engine test",
                                    comm.size());
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(config, *device, comm, test::testModel(dtype == DType::F32 ? 0.02 : -1));
  Run r;
  r.reports = test::train(engine, comm, kSteps, micro, hooks);
  r.values = test::trainedValues(engine);
  return r;
}

double maxAbs(const std::vector<std::vector<float>>& v) {
  double m = 0;
  for (const auto& t : v)
    for (float x : t) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

TEST_CASE("stages 0, 1, 2 and 3 end on the single-rank stage-0 parameters") {
  const int world = test::worldSize();
  comm::MpiCommunicator self(MPI_COMM_SELF);
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  int compared = 0;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (int accum : {1, 3}) {
      // The reference: one rank, the whole global batch in one micro-batch.
      const Run ref = trainOn(self, 0, kMicro * accum * world, 1, dtype);
      double tol = 0;
      if (dtype == DType::F32) {
        tol = 1e-6 * maxAbs(ref.values);
      } else {
        const double u = dtype == DType::F16 ? 0x1.0p-11 : 0x1.0p-8;
        // max|g|: the reference's gradient norm bounds every element (unscaled, unclipped).
        double gMax = 0;
        for (const StepReport& s : ref.reports) gMax = std::max(gMax, s.gradNorm);
        const double thetaMax = maxAbs(ref.values);
        tol = kSteps * kSgdLr * (3 * u * gMax + u * thetaMax) + u * thetaMax;
      }
      for (int stage : {0, 1, 2, 3}) {
        CAPTURE(nameOf(dtype));
        CAPTURE(accum);
        CAPTURE(stage);
        CAPTURE(world);
        const Run run = trainOn(comm, stage, kMicro, accum, dtype);
        double worst = 0;
        for (std::size_t t = 0; t < ref.values.size(); ++t)
          for (std::size_t i = 0; i < ref.values[t].size(); ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(run.values[t][i]) - ref.values[t][i]));
        CAPTURE(worst);
        CAPTURE(tol);
        CHECK(worst <= tol);
        // Every step was taken on both, and the global norm is the unsharded one.
        for (int s = 0; s < kSteps; ++s) {
          CHECK(run.reports[s].taken);
          CHECK(run.reports[s].gradNorm ==
                doctest::Approx(ref.reports[s].gradNorm).epsilon(dtype == DType::F32 ? 1e-6 : 0.05));
        }
        ++compared;
      }
    }
  }
  CHECK(compared == 24);
}

TEST_CASE("training moves the parameters and lowers the loss") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  const Config config =
      parseConfig(configText(2, kMicro, 1, comm.size(), DType::F32), "engine test", comm.size());
  MemoryLedger ledger;
  auto device = makeDevice("host:64M", ledger);
  Engine engine(config, *device, comm, test::testModel(0.02));
  const auto before = test::trainedValues(engine);
  std::vector<double> losses;
  test::train(engine, comm, 60, kMicro, {}, &losses);
  CHECK(test::trainedValues(engine) != before);
  CHECK(losses.back() < 0.8 * losses.front());
}
