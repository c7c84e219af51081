// The placement rule (partition/placement.h) against numbers worked out by hand: the ZeRO
// paper's 7.5B-parameter model on 64 ranks (Rajbhandari et al. 2020, figure 1: 120 GB, 31.4 GB,
// 16.6 GB and 1.9 GB per rank for Adam in fp16, K = 12), then with ZRT's padding and under
// offload, state by state. Each literal is derived in the comment beside it.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.h"
#include "partition/placement.h"

using namespace zrt;

namespace {

constexpr std::uint64_t kPsi = 7'500'000'000;  // the paper's Ψ
constexpr int kRanks = 64;                     // the paper's N_d

ModelStateOptions adam16(int stage, int world = kRanks) {
  ModelStateOptions o;
  o.stage = stage;
  o.worldSize = world;
  o.precision = DType::F16;
  o.optimizer = OptimizerType::Adam;
  return o;
}

double gbToTenth(std::uint64_t bytes) { return std::round(static_cast<double>(bytes) / 1e8) / 10; }

}  // namespace

TEST_CASE("the ZeRO paper's 7.5B model on 64 ranks: 120, 31.4, 16.6, 1.9 GB per rank") {
  // The paper: (2 + 2 + K)Ψ = 16·7.5e9 = 120 GB; 2Ψ + 2Ψ + KΨ/N = 30e9 + 1.406e9 = 31.4 GB;
  // 2Ψ + (2 + K)Ψ/N = 15e9 + 1.641e9 = 16.6 GB; (2 + 2 + K)Ψ/N = 1.875e9 = 1.9 GB.
  CHECK(gbToTenth(placeModelStates(adam16(0), kPsi, 0).bytes()) == doctest::Approx(120.0));
  CHECK(gbToTenth(placeModelStates(adam16(1), kPsi, 0).bytes()) == doctest::Approx(31.4));
  CHECK(gbToTenth(placeModelStates(adam16(2), kPsi, 0).bytes()) == doctest::Approx(16.6));
  CHECK(gbToTenth(placeModelStates(adam16(3), kPsi, 0).bytes()) == doctest::Approx(1.9));

  // To the byte, with ZRT's padding. Stage 0 splits nothing (N' = 1): Ψ' = ceil(7.5e9 / 32)·32 =
  // 7.5e9, already a multiple of 32. Stages 1-3 (N' = 64): Ψ' = ceil(7.5e9 / 2048)·2048 =
  // 3,662,110·2048 = 7,500,001,280, and the shard Ψ'/64 = 117,187,520.
  const std::uint64_t padded = 7'500'001'280, shard = 117'187'520;
  CHECK(placeModelStates(adam16(0), kPsi, 0).bytes() == 16 * kPsi);  // 120,000,000,000
  CHECK(placeModelStates(adam16(1), kPsi, 0).bytes() == 4 * padded + 12 * shard);  // 31,406,255,360
  CHECK(placeModelStates(adam16(2), kPsi, 0).bytes() == 2 * padded + 14 * shard);  // 16,640,627,840
  CHECK(placeModelStates(adam16(3), kPsi, 0).bytes() == 16 * shard);               // 1,875,000,320
  CHECK(4 * padded + 12 * shard == 31'406'255'360ull);
  CHECK(2 * padded + 14 * shard == 16'640'627'840ull);
  CHECK(16 * shard == 1'875'000'320ull);
}

TEST_CASE("the 7.5B model state by state: what each stage shards") {
  const std::uint64_t padded = 7'500'001'280, shard = 117'187'520;
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    const ModelStatePlacement m = placeModelStates(adam16(stage), kPsi, 0);
    CHECK(m.padded.parts == (stage == 0 ? 1 : kRanks));
    CHECK(m.optimizer.masterWeights);
    CHECK(m.optimizer.moments == 2);
    // Stage 0: every rank holds everything, unpadded: Ψ' = Ψ.
    const std::uint64_t whole = stage == 0 ? kPsi : padded, part = stage == 0 ? kPsi : shard;
    CHECK(m.parameters.elements == (stage == 3 ? part : whole));
    CHECK(m.parameters.elementBytes == 2);
    CHECK(m.parameters.sharded == (stage == 3));
    CHECK(m.gradients.elements == (stage >= 2 ? part : whole));
    CHECK(m.gradients.sharded == (stage >= 2));
    CHECK(m.gradientHostShard.elements == 0);
    CHECK(m.masterWeights.elements == part);
    CHECK(m.masterWeights.elementBytes == 4);
    CHECK(m.moment.elements == part);
    for (const StatePlacement* s : {&m.parameters, &m.gradients, &m.masterWeights, &m.moment})
      CHECK(s->place == MemPlace::Device);
  }
}

TEST_CASE("the 7.5B model under offload: what moves off the device, and where") {
  const std::uint64_t padded = 7'500'001'280, shard = 117'187'520;

  // Stage 1, optimizer to pageable host memory: the device keeps parameters and its whole
  // gradient buffer (2·Ψ' + 2·Ψ' = 30,000,005,120 B); the reduced gradient shard goes to pinned
  // host memory (2·Ψ'/N = 234,375,040 B), master and moments to pageable host (12·Ψ'/N =
  // 1,406,250,240 B).
  ModelStateOptions o = adam16(1);
  o.offloadOptimizer = OffloadDevice::Cpu;
  ModelStatePlacement m = placeModelStates(o, kPsi, 0);
  CHECK(m.parameters.bytes() + m.gradients.bytes() == 30'000'005'120ull);
  CHECK(m.gradients.place == MemPlace::Device);
  CHECK(m.gradientHostShard.bytes() == 234'375'040ull);
  CHECK(m.gradientHostShard.place == MemPlace::PinnedHost);
  CHECK(m.masterWeights.bytes() + 2 * m.moment.bytes() == 1'406'250'240ull);
  CHECK(m.masterWeights.place == MemPlace::Host);
  CHECK(m.moment.place == MemPlace::Host);

  // Stage 2, pinned: the gradient shard lives only on the host; the device holds the 16-bit
  // parameters alone, 2·Ψ' = 15,000,002,560 B.
  o.stage = 2;
  o.pinOptimizer = true;
  m = placeModelStates(o, kPsi, 0);
  CHECK(m.gradients.elements == 0);
  CHECK(m.gradientHostShard.elements == shard);
  CHECK(m.parameters.bytes() == 2 * padded);
  CHECK(m.parameters.bytes() == 15'000'002'560ull);
  CHECK(m.moment.place == MemPlace::PinnedHost);

  // Stage 3, optimizer and parameters to NVMe: nothing on the device; NVMe holds the parameter
  // shard and the optimizer state (2 + 12)·Ψ'/N = 1,640,625,280 B; pinned host the gradient
  // shard, 234,375,040 B.
  o.stage = 3;
  o.offloadOptimizer = OffloadDevice::Nvme;
  o.offloadParam = OffloadDevice::Nvme;
  m = placeModelStates(o, kPsi, 0);
  CHECK(m.parameters.place == MemPlace::Nvme);
  CHECK(m.masterWeights.place == MemPlace::Nvme);
  CHECK(m.parameters.bytes() + m.masterWeights.bytes() + 2 * m.moment.bytes() == 1'640'625'280ull);
  CHECK(m.gradientHostShard.bytes() == 234'375'040ull);
  CHECK(m.gradients.elements == 0);
  CHECK(m.bytes() == 16 * shard);  // offload moves bytes, it does not add any
  CHECK(m.parametersInMaster == 0);  // fp16: the master weights are not the parameters' values

  // The same in fp32 with both in one swap space: the fp32 master weights hold the parameter
  // shard's values, so the parameters have no file of their own and NVMe holds 12·Ψ'/N =
  // 1,406,250,240 B; with 1,048,576 elements (4 MiB) of the shard in host memory, the rest,
  // 116,138,944 elements, is read from the master weights' file.
  o.precision = DType::F32;
  o.paramAndOptimizerSwapShared = true;
  m = placeModelStates(o, kPsi, 0);
  CHECK(m.parameters.elements == 0);
  CHECK(m.parametersInMaster == shard);
  CHECK(m.masterWeights.bytes() + 2 * m.moment.bytes() == 1'406'250'240ull);
  o.maxInCpu = 1'048'576;
  m = placeModelStates(o, kPsi, 0);
  CHECK(m.parametersInCpu.elements == 1'048'576);
  CHECK(m.parametersInMaster == 116'138'944);
  // In separate swap spaces (different nvme_path) each keeps its own file.
  o.paramAndOptimizerSwapShared = false;
  m = placeModelStates(o, kPsi, 0);
  CHECK(m.parametersInMaster == 0);
  CHECK(m.parameters.elements == 116'138'944);
}

TEST_CASE("frozen parameters, the optimizer's K and padding on a small model") {
  // Ψ = 1000 trainable and Φ = 100 frozen over 4 ranks at stage 3: Ψ' = ceil(1000/128)·128 =
  // 1024, shard 256; Φ' = 128, shard 32.
  ModelStateOptions o = adam16(3, 4);
  o.rank = 3;
  ModelStatePlacement m = placeModelStates(o, 1000, 100);
  CHECK(m.padded.trainable == 1024);
  CHECK(m.padded.trainableShard == 256);
  CHECK(m.padded.frozen == 128);
  CHECK(m.padded.frozenShard == 32);
  CHECK(m.frozenParameters.elements == 32);
  CHECK(m.frozenParameters.sharded);
  // Frozen tensors have parameters only: 2·(256 + 32) + 2·256 + 12·256 = 4,160.
  CHECK(m.bytes() == 4160);

  // fp32 training keeps no master copy (the weights are it): K = 8 for Adam, 4 for SGD with
  // momentum, 0 for plain SGD; 2 + 2 of p becomes 4 + 4.
  o.precision = DType::F32;
  m = placeModelStates(o, 1000, 0);
  CHECK_FALSE(m.optimizer.masterWeights);
  CHECK(m.masterWeights.elements == 0);
  CHECK(m.bytes() == (4 + 4 + 8) * 256);
  o.optimizer = OptimizerType::SGD;
  o.sgdMomentum = true;
  CHECK(placeModelStates(o, 1000, 0).bytes() == (4 + 4 + 4) * 256);
  o.sgdMomentum = false;
  CHECK(placeModelStates(o, 1000, 0).bytes() == (4 + 4) * 256);
  // ... except offloaded: the CPU optimizer keeps its own fp32 copy of the shard.
  o.offloadOptimizer = OffloadDevice::Cpu;
  CHECK(placeModelStates(o, 1000, 0).masterWeights.elements == 256);
}

TEST_CASE("the rule refuses what the stage rules refuse") {
  ModelStateOptions o = adam16(0, 4);
  o.offloadOptimizer = OffloadDevice::Cpu;  // optimizer offload needs stage 1+
  CHECK_THROWS_WITH_AS(placeModelStates(o, 1000, 0), doctest::Contains("offload_optimizer"), InvalidArgument);
  CHECK_FALSE(offloadAllowed(0, OffloadDevice::Cpu, OffloadDevice::None));
  o.stage = 2;
  o.offloadOptimizer = OffloadDevice::Nvme;  // NVMe needs stage 3
  CHECK_THROWS_AS(placeModelStates(o, 1000, 0), InvalidArgument);
  CHECK_FALSE(offloadAllowed(2, OffloadDevice::Nvme, OffloadDevice::None));
  CHECK(offloadAllowed(3, OffloadDevice::Nvme, OffloadDevice::None));
  o.offloadOptimizer = OffloadDevice::None;
  o.offloadParam = OffloadDevice::Cpu;  // parameter offload needs stage 3
  CHECK_THROWS_WITH_AS(placeModelStates(o, 1000, 0), doctest::Contains("offload_param"), InvalidArgument);
  CHECK(offloadAllowed(3, OffloadDevice::Cpu, OffloadDevice::Cpu));
  o = adam16(4, 4);
  CHECK_THROWS_AS(placeModelStates(o, 1000, 0), InvalidArgument);
  CHECK_FALSE(offloadAllowed(4, OffloadDevice::None, OffloadDevice::None));
  o = adam16(1, 4);
  o.rank = 4;
  CHECK_THROWS_AS(placeModelStates(o, 1000, 0), InvalidArgument);
}
