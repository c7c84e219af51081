// zrt-plan's formulas against the worked examples of the issue and the ZeRO paper, and against
// numbers computed by hand (each literal below is derived in the comment next to it).
#include <doctest/doctest.h>

#include <cmath>

#include "core/shard.h"
#include "core/error.h"
#include "tools/plan/formulas.h"
#include "tools/plan/io_result.h"
#include "tools/plan/model_spec.h"

using namespace zrt;
using namespace zrt::plan;

namespace {

ModelStateInputs adam16(std::uint64_t psi, int stage, int world) {
  ModelStateInputs in;
  in.trainable = psi;
  in.stage = stage;
  in.worldSize = world;
  in.precision = DType::F16;
  in.optimizer = OptimizerType::Adam;
  return in;
}

std::uint64_t modelStateTotal(const PlanLedger& l) {
  std::uint64_t n = 0;
  for (int pl = 0; pl < kNumMemPlaces; ++pl) n += l.modelStates(static_cast<MemPlace>(pl));
  return n;
}

double gbRounded(double bytes) { return std::round(bytes / 1e8) / 10; }  // to 0.1 GB

}  // namespace

TEST_CASE("7B in fp16 with Adam: 14 GB params, 14 GB grads, 56 GB moments; 112 GB with master weights") {
  // 7e9 is a multiple of 32, so stage 0 pads nothing.
  const PlanLedger l = modelStateBytes(adam16(7'000'000'000, 0, 1));
  const auto d = MemPlace::Device;
  CHECK(l.get(Purpose::Parameters, d) == 14'000'000'000ull);
  CHECK(l.get(Purpose::Gradients, d) == 14'000'000'000ull);
  CHECK(l.get(Purpose::OptimizerMoments, d) == 56'000'000'000ull);
  CHECK(l.get(Purpose::Parameters, d) + l.get(Purpose::Gradients, d) +
            l.get(Purpose::OptimizerMoments, d) == 84'000'000'000ull);
  CHECK(l.get(Purpose::MasterWeights, d) == 28'000'000'000ull);
  CHECK(modelStateTotal(l) == 112'000'000'000ull);
  // The paper's formula: (2 + 2 + K)Ψ with K = 8 (moments only) and K = 12 (with master).
  CHECK(zeroPaperBytes(7'000'000'000, 0, 1, 2, 8) == doctest::Approx(84e9));
  CHECK(zeroPaperBytes(7'000'000'000, 0, 1, 2, 12) == doctest::Approx(112e9));
}

TEST_CASE("ZeRO paper's 7.5B-parameter, 64-rank example: 120, 31.4, 16.6, 1.9 GB") {
  const std::uint64_t psi = 7'500'000'000;
  CHECK(gbRounded(zeroPaperBytes(psi, 0, 64, 2, 12)) == doctest::Approx(120.0));
  CHECK(gbRounded(zeroPaperBytes(psi, 1, 64, 2, 12)) == doctest::Approx(31.4));
  CHECK(gbRounded(zeroPaperBytes(psi, 2, 64, 2, 12)) == doctest::Approx(16.6));
  CHECK(gbRounded(zeroPaperBytes(psi, 3, 64, 2, 12)) == doctest::Approx(1.9));

  // With ZRT's padding: Ψ' = ceil(7.5e9 / (64·32))·64·32 = 7,500,001,280; Ψ'/64 = 117,187,520.
  CHECK(paddedLength(psi, 64, kShardAlignElements) == 7'500'001'280ull);
  CHECK(modelStateTotal(modelStateBytes(adam16(psi, 0, 64))) == 120'000'000'000ull);
  CHECK(modelStateTotal(modelStateBytes(adam16(psi, 1, 64))) == 31'406'255'360ull);  // 4·Ψ' + 12·Ψ'/N
  CHECK(modelStateTotal(modelStateBytes(adam16(psi, 2, 64))) == 16'640'627'840ull);  // 2·Ψ' + 14·Ψ'/N
  CHECK(modelStateTotal(modelStateBytes(adam16(psi, 3, 64))) == 1'875'000'320ull);   // 16·Ψ'/N
  for (int stage = 0; stage <= 3; ++stage) {
    CHECK(gbRounded(static_cast<double>(modelStateTotal(modelStateBytes(adam16(psi, stage, 64))))) ==
          doctest::Approx(gbRounded(zeroPaperBytes(psi, stage, 64, 2, 12))));
  }
}

TEST_CASE("K per optimizer and precision") {
  auto k = [](OptimizerType t, bool mom, DType p, bool off) {
    return optimizerBytesPerParam(optimizerStateSpec(t, mom, p, off));
  };
  CHECK(k(OptimizerType::Adam, false, DType::F16, false) == 12);
  CHECK(k(OptimizerType::AdamW, false, DType::BF16, false) == 12);
  CHECK(k(OptimizerType::SGD, true, DType::F16, false) == 8);   // master + momentum
  CHECK(k(OptimizerType::SGD, false, DType::F16, false) == 4);  // master only
  CHECK(k(OptimizerType::Adam, false, DType::F32, false) == 8);  // fp32 weights are the master
  CHECK(k(OptimizerType::SGD, true, DType::F32, false) == 4);
  CHECK(k(OptimizerType::SGD, false, DType::F32, false) == 0);
  CHECK(k(OptimizerType::Adam, false, DType::F32, true) == 12);  // the CPU optimizer's own copy
}

TEST_CASE("placement under offload") {
  // Ψ = 1000 over 4 ranks: Ψ' = ceil(1000/128)·128 = 1024, shard 256.
  ModelStateInputs in = adam16(1000, 2, 4);
  in.offloadOptimizer = OffloadDevice::Cpu;
  in.pinOptimizer = true;
  PlanLedger l = modelStateBytes(in);
  CHECK(l.get(Purpose::Parameters, MemPlace::Device) == 2 * 1024);
  CHECK(l.get(Purpose::Gradients, MemPlace::Device) == 0);
  CHECK(l.get(Purpose::Gradients, MemPlace::PinnedHost) == 2 * 256);
  CHECK(l.get(Purpose::MasterWeights, MemPlace::PinnedHost) == 4 * 256);
  CHECK(l.get(Purpose::OptimizerMoments, MemPlace::PinnedHost) == 8 * 256);
  CHECK(l.modelStates(MemPlace::Device) == 2 * 1024);

  in.stage = 1;  // stage 1 keeps the whole gradient buffer on the device as well
  in.pinOptimizer = false;
  l = modelStateBytes(in);
  CHECK(l.get(Purpose::Gradients, MemPlace::Device) == 2 * 1024);
  CHECK(l.get(Purpose::Gradients, MemPlace::PinnedHost) == 2 * 256);
  CHECK(l.get(Purpose::MasterWeights, MemPlace::Host) == 4 * 256);

  in.stage = 3;
  in.offloadOptimizer = OffloadDevice::Nvme;
  in.offloadParam = OffloadDevice::Nvme;
  in.frozen = 100;  // Φ' = 128, shard 32
  l = modelStateBytes(in);
  CHECK(l.get(Purpose::Parameters, MemPlace::Nvme) == 2 * (256 + 32));
  CHECK(l.get(Purpose::MasterWeights, MemPlace::Nvme) == 4 * 256);
  CHECK(l.get(Purpose::OptimizerMoments, MemPlace::Nvme) == 8 * 256);
  CHECK(l.modelStates(MemPlace::Device) == 0);

  in.stage = 2;  // parameters cannot be offloaded below stage 3
  CHECK_THROWS_AS(modelStateBytes(in), InvalidArgument);
  in.stage = 0;
  in.offloadParam = OffloadDevice::None;
  CHECK_THROWS_AS(modelStateBytes(in), InvalidArgument);
}

TEST_CASE("activations per Korthikanti et al.") {
  ActivationInputs in;
  in.shape = {2, 4096, 32, 0};
  in.seqLen = 2048;
  in.microBatch = 1;
  // sbh(34 + 5as/h) = 2048·4096·(34 + 5·32·2048/4096) = 2048·4096·114 = 956,301,312.
  CHECK(layerActivationBytes(in) == 956'301'312ull);
  CHECK(activationBytes(in) == 2 * 956'301'312ull);
  in.checkpointing = true;  // L·2sbh + one layer = 2·2·2048·4096 + 956,301,312
  CHECK(activationBytes(in) == 2ull * 2 * 2048 * 4096 + 956'301'312ull);
  in.shape.vocab = 1000;  // + 4·s·b·V for the fp32 logits
  CHECK(activationBytes(in) == 2ull * 2 * 2048 * 4096 + 956'301'312ull + 4ull * 2048 * 1000);
  in.flashAttention = true;
  CHECK(layerActivationBytes(in) == 34ull * 2048 * 4096);
  in.precision = DType::F32;
  CHECK(layerActivationBytes(in) == 2 * 34ull * 2048 * 4096);
}

namespace {

// Buffer inputs for `psi` fp32 trainable elements under fp32 AdamW, placed by the allocator's rule.
BufferInputs fp32Buffers(std::uint64_t psi, int stage, int world, std::uint64_t accumulation = 1,
                         OffloadDevice offOpt = OffloadDevice::None, OffloadDevice offParam = OffloadDevice::None,
                         std::uint64_t maxInCpu = 0) {
  ModelStateInputs ms;
  ms.trainable = psi;
  ms.stage = stage;
  ms.worldSize = world;
  ms.precision = DType::F32;
  ms.optimizer = OptimizerType::AdamW;
  ms.offloadOptimizer = offOpt;
  ms.offloadParam = offParam;
  ms.maxInCpu = maxInCpu;
  ms.accumulationSteps = static_cast<int>(accumulation);
  BufferInputs in;
  in.placement = modelStatePlacement(ms);
  in.stage = stage;
  in.worldSize = world;
  in.precision = DType::F32;
  in.gradAccum = accumulation;
  in.offloadOptimizer = offOpt;
  in.offloadParam = offParam;
  return in;
}

std::uint64_t everywhere(const PlanLedger& l, Purpose p) {
  std::uint64_t n = 0;
  for (int pl = 0; pl < kNumMemPlaces; ++pl) n += l.get(p, static_cast<MemPlace>(pl));
  return n;
}

}  // namespace

TEST_CASE("comm buckets: the bucketer's staging in host memory at stages 2-3, none at 0-1; its "
          "accumulation receive buffers on the device") {
  // Tensors of 300, 500 and 200 elements in buckets of at most 600, filled in backward order:
  // [800, 1000) (200; 500 more would pass 600), [300, 800) (500), [0, 300) (300). Largest: 500.
  BufferInputs in = fp32Buffers(1000, 0, 2);
  in.trainableTensors = {300, 500, 200};
  in.zero.reduce_bucket_size = 600;
  for (int stage : {0, 1}) {  // all-reduced in place in the gradient buffer
    in.stage = stage;
    CHECK(everywhere(bufferBytes(in), Purpose::CommBuckets) == 0);
  }
  in = fp32Buffers(1000, 2, 2);
  in.trainableTensors = {300, 500, 200};
  in.zero.reduce_bucket_size = 600;
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 1 * 500 * 4);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Device) == 0);
  in.overlapComm = true;  // two staging buffers
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 2 * 500 * 4);
  // fp32 with 4 accumulation steps: the micro-steps add up in the bucketer, which receives each
  // bucket's piece of rank 0's shard [0, 512) (Ψ' = 1024 on 2 ranks) on the device, where it
  // adds it into the gradient shard; its staging buffers stay in host memory.
  // Slot 0 stages buckets 0 and 2 (pieces 0 and 300), slot 1 bucket 1 (piece [300, 512) = 212).
  in = fp32Buffers(1000, 3, 2, 4);
  in.trainableTensors = {300, 500, 200};
  in.zero.reduce_bucket_size = 600;
  in.overlapComm = true;
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 2 * 500 * 4);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Device) == (300 + 212) * 4);
  // bf16 with accumulation: the fp32 accumulator takes the sum, the bucketer only stages.
  ModelStateInputs ms;
  ms.trainable = 1000;
  ms.stage = 2;
  ms.worldSize = 2;
  ms.precision = DType::BF16;
  ms.accumulationSteps = 4;
  in.placement = modelStatePlacement(ms);
  in.precision = DType::BF16;
  CHECK(in.placement.gradientAccumulator.elements == 512);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 2 * 500 * 2);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Device) == 0);
  // Tensors not known: buckets of min(reduce_bucket_size, Ψ') = 600.
  in.trainableTensors.clear();
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 2 * 600 * 2);
  // ... and with fp32 accumulation receive buffers of min(reduce_bucket_size, Ψ'/N) = 512.
  in = fp32Buffers(1000, 2, 2, 4);
  in.zero.reduce_bucket_size = 600;
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 1 * 600 * 4);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Device) == 1 * 512 * 4);
  // A tensor larger than a bucket gets a bucket of its own (comm/bucket_plan.h).
  in.trainableTensors = {1000};
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Host) == 1 * 1000 * 4);
  CHECK(bufferBytes(in).get(Purpose::CommBuckets, MemPlace::Device) == 1 * 512 * 4);
}

TEST_CASE("the gradient workspace holds the widest module's trainable gradients, on the device") {
  BufferInputs in = fp32Buffers(1000, 0, 1);
  in.modules = {{"embed", 300, 0}, {"h.0", 500, 64}, {"h.1", 200, 0}};
  CHECK(bufferBytes(in).get(Purpose::GradientWorkspace, MemPlace::Device) == 500 * 4);
  CHECK(bufferBytes(in).byTag(MemTag::Other, MemPlace::Device) == 500 * 4);
  in.modules.clear();  // modules not known: not counted
  CHECK(everywhere(bufferBytes(in), Purpose::GradientWorkspace) == 0);
}

TEST_CASE("stage 3's gathered copies: persistent modules plus the pool up to max_live") {
  BufferInputs in = fp32Buffers(1000, 3, 2);
  in.modules = {{"a", 300, 0}, {"b", 700, 0}, {"ln", 0, 50}};
  in.zero.stage3_param_persistence_threshold = 100;  // "ln" (50 elements) stays whole
  in.zero.stage3_max_live_parameters = 1'000'000'000;
  CHECK(bufferBytes(in).get(Purpose::GatheredParams, MemPlace::Device) == (50 + 1000) * 4);
  in.zero.stage3_max_live_parameters = 600;  // the pool of the others stays within 600
  CHECK(bufferBytes(in).get(Purpose::GatheredParams, MemPlace::Device) == (50 + 600) * 4);
  // Modules not known: min(Ψ' + Φ', max(max_live, largest tensor)) = min(1024, max(600, 700)).
  in.modules.clear();
  in.largestTensor = 700;
  CHECK(bufferBytes(in).get(Purpose::GatheredParams, MemPlace::Device) == 700 * 4);
}

TEST_CASE("NVMe swap buffers: the optimizer's pool and the parameters' staging buffers") {
  // fp32 AdamW offloaded keeps master weights and two moments: 3 states. Ψ' = 1024 on 2 ranks,
  // shard 512, a sub-group of min(sub_group_size, 512) rounded up to 1024 elements (4 KiB):
  // buffers of 1024·4·3 = 12,288 bytes. The shard is one sub-group, so a pass holds one buffer
  // whatever buffer_count says.
  BufferInputs in = fp32Buffers(1000, 3, 2, 1, OffloadDevice::Nvme);
  in.zero.offload_optimizer.buffer_count = 4;
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 12'288);
  // A smaller sub-group: 100 elements, rounded to 1024: still one.
  in.zero.sub_group_size = 100;
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 12'288);
  // Ψ' = 8000, shard 4000: four sub-groups of 1024, and as many buffers as buffer_count allows.
  in = fp32Buffers(8000, 3, 2, 1, OffloadDevice::Nvme);
  in.zero.sub_group_size = 1024;
  in.zero.offload_optimizer.buffer_count = 4;
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 4 * 12'288);
  in.zero.offload_optimizer.buffer_count = 2;
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 2 * 12'288);
  // On the host device the pool moves into huge pages (here a made-up 16 KiB one): 4 buffers,
  // 49,152 bytes, are 3 whole pages, plus one page less 4 KiB for aligning the start.
  in.zero.offload_optimizer.buffer_count = 4;
  in.hugePageBytes = 16'384;
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 49'152 + 16'384 - 4'096);

  // Parameters on NVMe: modules of 3000 and 5000 fp32 elements, Ψ' = 8000 on 2 ranks, shard 4000.
  // Rank 0 holds all of module a (3000 from shard element 0) and 1000 of b (from element 3000).
  in = fp32Buffers(8000, 3, 2, 1, OffloadDevice::Cpu, OffloadDevice::Nvme, 0);
  in.modules = {{"a", 3000, 0}, {"b", 5000, 0}};
  in.zero.offload_param.buffer_count = 5;
  // Every element on NVMe: the largest piece, 3000·4 + 2·4096 = 20,192 bytes, to 20,480; no
  // frozen shard, so its part is stagingBytes(0) with alignment 1: 2 bytes.
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 5 * (20'480 + 2));
  // max_in_cpu 3500 keeps 3072 elements (a 4 KiB boundary of fp32) in memory: module a is all
  // there; b's piece [3000, 4000) reaches NVMe: 1000·4 + 8192 = 12,192, to 12,288.
  in = fp32Buffers(8000, 3, 2, 1, OffloadDevice::Cpu, OffloadDevice::Nvme, 3500);
  in.modules = {{"a", 3000, 0}, {"b", 5000, 0}};
  in.zero.offload_param.buffer_count = 5;
  CHECK(in.placement.parametersInCpu.elements == 3072);
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 5 * (12'288 + 2));
  // max_in_cpu covering the shard: nothing is read from NVMe, no staging.
  in = fp32Buffers(8000, 3, 2, 1, OffloadDevice::Cpu, OffloadDevice::Nvme, 1'000'000);
  in.modules = {{"a", 3000, 0}, {"b", 5000, 0}};
  CHECK(bufferBytes(in).get(Purpose::SwapBuffers, MemPlace::PinnedHost) == 0);
}

TEST_CASE("step time: recomputation costs one extra forward, a third of a full step") {
  StepTimeInputs in;
  in.trainable = in.total = 1'000'000'000;
  in.tokensPerStep = 4096;
  in.hardware.worldSize = 1;
  const StepTime plain = stepTime(in);
  CHECK(plain.compute == doctest::Approx(6e9 * 4096 / 100e12));
  CHECK(plain.comm == 0.0);  // one rank: nothing to reduce
  in.checkpointing = true;
  CHECK(stepTime(in).recompute / plain.compute == doctest::Approx(1.0 / 3));
  // Offloading the optimizer of a 1-rank, 1-rank-per-node job: the gradient shard down and the
  // parameters up over PCIe, the optimizer's traffic through host memory.
  in.checkpointing = false;
  in.padded.trainable = in.padded.trainableShard = 1'000'000'000;
  in.offloadOptimizer = OffloadDevice::Cpu;
  const StepTime off = stepTime(in);
  CHECK(off.pcieBytes == doctest::Approx(4e9));
  CHECK(off.pcie == doctest::Approx(4e9 / 25e9));
  CHECK(off.cpuBytes == doctest::Approx(1e9 * (2 + 24 + 2)));
  in.offloadOptimizer = OffloadDevice::Nvme;
  CHECK(stepTime(in).nvme == doctest::Approx(12e9 / 3e9 + 12e9 / 2e9));
}

TEST_CASE("parameter counts") {
  CHECK(parseParamCount("7B") == 7'000'000'000ull);
  CHECK(parseParamCount("7e9") == 7'000'000'000ull);
  CHECK(parseParamCount("1.3b") == 1'300'000'000ull);
  CHECK(parseParamCount("350M") == 350'000'000ull);
  CHECK(parseParamCount("125k") == 125'000ull);
  CHECK(parseParamCount("12345") == 12'345ull);
  for (const char* bad : {"", "7X", "-1", "0", "B", "1e30"}) {
    CHECK_THROWS_WITH_AS(parseParamCount(bad), doctest::Contains("--params"), InvalidArgument);
  }
  // 12·L·h² + V·h for L = 32, h = 4096, V = 32000: 6,442,450,944 + 131,072,000.
  const TransformerShape s{32, 4096, 32, 32000};
  CHECK(transformerParamCount(s) == 6'573'522'944ull);
  CHECK(fromTransformerShape(s).trainableParams() == transformerParamCount(s));
}

TEST_CASE("LoRA: frozen base, r·(d_in + d_out) adapter parameters per projection") {
  const ModelSpec base = fromTransformerShape({2, 64, 4, 100});
  const ModelSpec lora = addLora(base, 8, {"q", "v", "fc1"});
  CHECK(lora.frozenParams() == base.trainableParams());
  // Per layer: q and v are [64, 64]: 8·128 each; fc1 is [256, 64]: 8·320. Two layers.
  CHECK(lora.trainableParams() == 2 * (8 * 128 + 8 * 128 + 8 * 320));
  CHECK(lora.loraAdaptedTensors == 6);
  CHECK_THROWS_WITH_AS(addLora(base, 8, {"nothing"}), doctest::Contains("--lora-targets"), InvalidArgument);
  CHECK_THROWS_AS(addLora(base, 0, {"q"}), InvalidArgument);
  // Manifest-style names with a _proj suffix match too.
  ModelSpec m;
  m.tensors.push_back({"model.layers.0.self_attn.q_proj.weight", {64, 32}, true});
  m.tensors.push_back({"model.layers.0.self_attn.q_proj.bias", {64}, true});
  CHECK(addLora(m, 4, {"q"}).trainableParams() == 4 * (64 + 32));
}

TEST_CASE("manifest") {
  const ModelSpec m = parseManifest(R"({"format": "zrt-manifest", "version": 1,
      "tensors": [{"name": "a", "shape": [3, 4]}, {"name": "b", "shape": [5], "trainable": false,
                   "dtype": "fp16"}],
      "model": {"layers": 1, "hidden": 4, "heads": 2, "vocab": 3}})",
                                    "m.json");
  CHECK(m.trainableParams() == 12);
  CHECK(m.frozenParams() == 5);
  REQUIRE(m.shape.has_value());
  CHECK(m.shape->hidden == 4);
  CHECK_THROWS_WITH_AS(parseManifest("{", "bad.json"), doctest::Contains("bad.json"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseManifest(R"({"tensors": [{"name": "x", "shape": [2, -1]}]})", "neg.json"),
                       doctest::Contains("tensors[0].shape[1]"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseManifest(R"({"tensors": [{"shape": [2]}]})", "noname.json"),
                       doctest::Contains("tensors[0]"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseManifest(R"({"version": 2, "tensors": []})", "v2.json"),
                       doctest::Contains("version"), InvalidArgument);
}

TEST_CASE("NVMe bandwidth from zrt-io results") {
  const NvmeBandwidth b = parseIoResults(
      "{\"mode\": \"read\", \"block_size\": 1048576, \"queue_depth\": 8, \"threads\": 1, \"bytes\": 1, "
      "\"seconds\": 1, \"gbps\": 2.5}\n"
      "{\"mode\": \"read\", \"gbps\": 3.5}\n\n"
      "{\"mode\": \"write\", \"gbps\": 1.5}\n",
      "io.json");
  CHECK(b.readBps == doctest::Approx(3.5e9));
  CHECK(b.writeBps == doctest::Approx(1.5e9));
  const NvmeBandwidth rw = parseIoResults("{\"mode\": \"rw\", \"gbps\": 2}\n", "rw.json");
  CHECK(rw.readBps == doctest::Approx(2e9));
  CHECK(rw.writeBps == doctest::Approx(2e9));
  CHECK_THROWS_WITH_AS(parseIoResults("{\"mode\": \"read\", \"gbps\": 2}\n", "r.json"),
                       doctest::Contains("write"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parseIoResults("not json\n", "x.json"), doctest::Contains("x.json:1"), InvalidArgument);
}
