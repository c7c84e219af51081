// GPT-2's layers on a device against the same model on `host`, tensor by tensor: the loss, the
// logits and every gradient of one forward and backward, with activation checkpoints offloaded,
// with LoRA adapters on every layer, in fp32 and bf16, on a shape whose T, C and head width are
// neither equal nor multiples of a warp. The model reads its parameters and writes its gradients
// in device memory (DeviceSource), as it does through the Engine. On the strict device (the
// default: device memory the host cannot touch, every stream task delayed) everything is the same
// bits; on a GPU (gpt2_device_cuda_test, ZRT_TEST_DEVICE_SPEC cuda:0, skipped where none
// answers) within fp32 rounding, since cuBLAS and the CUDA kernels sum in other orders.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "tests/tools/gpt2/gpt2_test_source.h"

#ifndef ZRT_TEST_DEVICE_SPEC
#define ZRT_TEST_DEVICE_SPEC "host-strict"
#endif

using namespace zrt;
using namespace zrt::trainer;
using namespace zrt::trainer::test;

namespace {

const Gpt2Shape kShape{.layers = 2, .hidden = 48, .heads = 3, .seqLen = 40, .vocab = 256};
constexpr int kBatch = 3;

// A TestSource's tensors on a device: parameters copied up when asked for, gradients handed out
// as device buffers full of garbage and copied down into the TestSource at backwardDone.
class DeviceSource final : public ParameterSource {
 public:
  DeviceSource(TestSource& inner, Device& device) : inner_(inner), device_(device), stream_(device.createStream()) {}

  std::vector<TensorRef> parameters(std::size_t m) override {
    std::vector<TensorRef> refs = inner_.parameters(m);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      DeviceMemory& d = buffer(values_, m, i, refs[i]);
      device_.copyAsync(d.data(), refs[i].data, d.bytes(), *stream_);
      refs[i].data = d.data();
    }
    stream_->synchronize();
    return refs;
  }
  void release(std::size_t m) override { inner_.release(m); }
  std::vector<TensorRef> gradients(std::size_t m) override {
    host_ = inner_.gradients(m);
    std::vector<TensorRef> refs = host_;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      if (!refs[i].data) continue;
      DeviceMemory& d = buffer(grads_, m, i, refs[i]);
      device_.memsetAsync(d.data(), 0xAB, d.bytes(), *stream_);  // garbage: the model must overwrite
      refs[i].data = d.data();
    }
    stream_->synchronize();
    return refs;
  }
  void backwardDone(std::size_t m) override {
    for (std::size_t i = 0; i < host_.size(); ++i)
      if (host_[i].data) device_.copyAsync(host_[i].data, grads_.at({m, i}).data(), grads_.at({m, i}).bytes(), *stream_);
    stream_->synchronize();
    inner_.backwardDone(m);
  }

 private:
  DeviceMemory& buffer(std::map<std::pair<std::size_t, std::size_t>, DeviceMemory>& in, std::size_t m,
                       std::size_t i, const TensorRef& r) {
    DeviceMemory& d = in[{m, i}];
    if (!d) d = device_.allocate(r.numel * dtypeSize(r.dtype), MemTag::Parameters);
    return d;
  }

  TestSource& inner_;
  Device& device_;
  std::unique_ptr<Stream> stream_;
  std::map<std::pair<std::size_t, std::size_t>, DeviceMemory> values_, grads_;
  std::vector<TensorRef> host_;
};

bool onStrictDevice() { return std::string(ZRT_TEST_DEVICE_SPEC).rfind("host-strict", 0) == 0; }

// Relative distance |a - b| / |a| over a whole tensor (0 for two zero tensors).
double relativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(a[i]) * a[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// The device's figure against host's: the same bits on the strict device, else within `bound`.
void checkClose(const std::vector<float>& host, const std::vector<float>& device, double bound) {
  REQUIRE(host.size() == device.size());
  if (onStrictDevice())
    CHECK(std::memcmp(host.data(), device.data(), host.size() * sizeof(float)) == 0);
  else
    CHECK(relativeDistance(host, device) <= bound);
}

}  // namespace

TEST_CASE("gpt2 on the device: loss, logits and every gradient as on host") {
  ::setenv("ZRT_STRICT_STREAM_DELAY_US", "50", 1);
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc, LoraTarget::MlpProj};
  const Gpt2Options options[] = {{}, {true, true, {}}, {true, false, lora}};
  const std::size_t n = static_cast<std::size_t>(kBatch) * kShape.seqLen;
  const auto inputs = randomTokens(n, kShape.vocab, 21), targets = randomTokens(n, kShape.vocab, 22);
  int compared = 0;
  for (const Gpt2Options& o : options) {
    for (DType dt : {DType::F32, DType::BF16}) {
      CAPTURE(o.activationCheckpointing);
      CAPTURE(o.checkpointOffload);
      CAPTURE(o.lora.rank);
      CAPTURE(nameOf(dt));
      // 16-bit gradients round to bf16 on the way out: a rounding's step (2^-8) bounds them.
      const double bound = dt == DType::F32 ? 1e-5 : 1e-2;
      MemoryLedger hostLedger, deviceLedger;
      auto host = makeDevice("host", hostLedger);
      auto device = makeDevice(ZRT_TEST_DEVICE_SPEC, deviceLedger);
      REQUIRE_FALSE(device->hostReadsDeviceMemory());
      const EngineModel spec = gpt2Model(kShape, 5, o.lora);
      TestSource hostSrc(spec, dt), deviceSrc(spec, dt);
      randomise(hostSrc, 9, 0.3f);
      randomise(deviceSrc, 9, 0.3f);
      DeviceSource onDevice(deviceSrc, *device);
      Gpt2 hostModel(kShape, o, *host, kBatch), deviceModel(kShape, o, *device, kBatch);

      hostSrc.beginMicroStep();
      deviceSrc.beginMicroStep();
      const double hostLoss = hostModel.forwardBackward(hostSrc, inputs.data(), targets.data(), kBatch, 1.5);
      const double deviceLoss = deviceModel.forwardBackward(onDevice, inputs.data(), targets.data(), kBatch, 1.5);
      REQUIRE(deviceSrc.allReported());
      if (onStrictDevice())
        CHECK(std::memcmp(&hostLoss, &deviceLoss, sizeof(double)) == 0);
      else
        CHECK(std::abs(deviceLoss - hostLoss) <= 1e-5 * std::abs(hostLoss));
      for (std::size_t m = 0; m < hostSrc.numModules(); ++m)
        for (std::size_t i = 0; i < hostSrc.numParams(m); ++i) {
          if (!hostSrc.trainable(m, i)) continue;
          CAPTURE(hostSrc.name(m, i));
          checkClose(hostSrc.grad(m, i), deviceSrc.grad(m, i), bound);
          ++compared;
        }

      hostSrc.beginMicroStep();
      deviceSrc.beginMicroStep();
      checkClose(hostModel.logits(hostSrc, inputs.data(), kBatch), deviceModel.logits(onDevice, inputs.data(), kBatch),
                 1e-5);
      const double hostEval = hostModel.loss(hostSrc, inputs.data(), targets.data(), kBatch);
      const double deviceEval = deviceModel.loss(onDevice, inputs.data(), targets.data(), kBatch);
      if (onStrictDevice())
        CHECK(hostEval == deviceEval);
      else
        CHECK(std::abs(deviceEval - hostEval) <= 1e-5 * std::abs(hostEval));
    }
  }
  // Plain and checkpointed: 2 x 2 x (2 embeddings + 2 x 12 + 2 ln_f); LoRA: 2 x 2 x 4 x 2 adapters.
  CHECK(compared == 2 * 2 * 28 + 2 * 2 * 8);
}
