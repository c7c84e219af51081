// The prediction's plumbing: the planner's model is the trainer's GPT-2, parameter for parameter
// (against GPT-2's count worked by hand), the LoRA variant counts r·(in + out) per adapted layer,
// and a rung's config file reaches the planner (model states by hand for fp32 AdamW).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "tools/ladder/prediction.h"
#include "tools/trainer/model/gpt2.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

// GPT-2 with vocabulary V = 256, width C, T positions, L blocks: wte V·C, wpe T·C; per block
// ln_1 2C, c_attn C·3C + 3C, c_proj C·C + C, ln_2 2C, c_fc C·4C + 4C, mlp c_proj 4C·C + C
// (12C² + 13C); ln_f 2C.
std::uint64_t gpt2Params(std::uint64_t L, std::uint64_t C, std::uint64_t T) {
  return 256 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

std::uint64_t roundUp(std::uint64_t n, std::uint64_t m) { return (n + m - 1) / m * m; }

std::filesystem::path writeConfig(const LadderSpec& spec, const Rung& rung) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("zrt_ladder_prediction_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream out(path);
  out << rungConfig(defaultBaseConfig(), spec, rung).dump(2);
  return path;
}

}  // namespace

TEST_CASE("the planner's model is zrt-train's GPT-2, every parameter counted") {
  for (const ModelShape s : {ModelShape{4, 128, 4, 64}, ModelShape{2, 32, 2, 32}, ModelShape{3, 48, 6, 17}}) {
    CAPTURE(s.layers);
    CAPTURE(s.hidden);
    const plan::ModelSpec m = gpt2PlanModel(s);
    CHECK(m.totalParams() == gpt2Params(s.layers, s.hidden, s.seqLen));
    CHECK(m.trainableParams() == m.totalParams());
    std::uint64_t registered = 0;
    for (const ModuleSpec& mod : trainer::gpt2Model({s.layers, s.hidden, s.heads, s.seqLen, 256}, 0).modules)
      for (const ParamSpec& p : mod.params) registered += numelOf(p);
    CHECK(m.totalParams() == registered);
    REQUIRE(m.shape);
    CHECK(m.shape->vocab == 256);
    CHECK(m.shape->layers == static_cast<std::uint64_t>(s.layers));
  }
  // The README's model: 256·128 + 64·128 + 4·(12·128² + 13·128) + 2·128.
  CHECK(gpt2PlanModel({4, 128, 4, 64}).totalParams() == 834'304);
}

TEST_CASE("the LoRA variant adds r·(in + out) trainable parameters per adapted layer, base frozen") {
  const ModelShape s{3, 40, 4, 16};
  const std::uint64_t C = 40, L = 3;
  const plan::ModelSpec base = gpt2PlanModel(s);
  LoraSettings lora;
  lora.rank = 5;
  // qkv: C -> 3C, proj: C -> C, fc: C -> 4C, mlp_proj: 4C -> C.
  lora.targets = {"qkv", "proj", "fc", "mlp_proj"};
  plan::ModelSpec m = gpt2LoraPlanModel(s, lora);
  CHECK(m.frozenParams() == base.totalParams());
  CHECK(m.trainableParams() == L * 5 * ((C + 3 * C) + (C + C) + (C + 4 * C) + (4 * C + C)));
  CHECK(m.loraAdaptedTensors == 4 * L);
  CHECK(m.loraRank == 5);
  lora.targets = {"proj"};  // attn.c_proj only, not mlp.c_proj
  m = gpt2LoraPlanModel(s, lora);
  CHECK(m.trainableParams() == L * 5 * (C + C));
  bool named = false;
  for (const plan::TensorSpec& t : m.tensors)
    if (t.name == "h.2.attn.c_proj.lora_B.weight") {
      named = true;
      CHECK(t.shape == std::vector<std::uint64_t>{C, 5});
      CHECK(t.trainable);
    }
  CHECK(named);
  lora.targets = {"qkv", "attention"};
  CHECK_THROWS_WITH_AS(gpt2LoraPlanModel(s, lora), doctest::Contains("--lora-targets: unknown layer 'attention'"),
                       InvalidArgument);
}

TEST_CASE("a rung's config reaches the planner: fp32 AdamW model states by hand") {
  LadderSpec spec;  // 4 x 128, 2 ranks, the built-in fp32 AdamW base
  spec.budgetBytes = 16 << 20;
  spec.nvmePath = "/tmp";
  const std::uint64_t psi = 834'304;
  const std::vector<Rung> rungs = ladderRungs(spec);
  // Stage 0: fp32 parameters and gradients (4 + 4 bytes) and two fp32 moments (8), no master
  // copy (fp32 training, nothing offloaded): 16 bytes over Ψ' = Ψ rounded to 32 elements.
  auto file = writeConfig(spec, rungs[0]);
  Prediction p = predict(spec, rungs[0], file);
  CHECK(p.trainable == psi);
  CHECK(p.bytes.modelStates(MemPlace::Device) == 16 * roundUp(psi, 32));
  // The activations are the trainer's own buffers at the rung's micro-batch (fp32, no
  // checkpointing).
  CHECK(p.bytes.get(MemTag::Activations, MemPlace::Device) ==
        trainer::gpt2ActivationBytes({4, 128, 4, 64, 256}, {}, 4, DType::F32).device);
  // The Engine's gradient workspace: the widest module, a block, 12·128² + 13·128 fp32 elements.
  CHECK(p.bytes.get(MemTag::Other, MemPlace::Device) == 4 * (12 * 128 * 128 + 13 * 128));
  // Stage 0 all-reduces in place: no comm buckets anywhere.
  CHECK(p.bytes.get(MemTag::CommBuckets, MemPlace::Device) + p.bytes.get(MemTag::CommBuckets, MemPlace::Host) == 0);
  // Stage 2 (overlap_comm, one bucket of all Ψ elements, fp32 with 8 accumulation steps): two
  // staging buffers of Ψ in host memory, and a receive buffer of rank 0's shard on the device.
  file = writeConfig(spec, rungs[4]);
  p = predict(spec, rungs[4], file);
  CHECK(p.bytes.get(MemTag::CommBuckets, MemPlace::Host) == 2 * psi * 4);
  CHECK(p.bytes.get(MemTag::CommBuckets, MemPlace::Device) == roundUp(psi, 64) / 2 * 4);
  // Stage 3 on 2 ranks: each rank holds 16 bytes of its half, Ψ' rounded to 2 · 32.
  file = writeConfig(spec, rungs[5]);
  p = predict(spec, rungs[5], file);
  CHECK(p.bytes.modelStates(MemPlace::Device) == 16 * roundUp(psi, 64) / 2);
  // CPU offload: the moments and an fp32 master copy (the CPU optimizer keeps its own) of the
  // shard, the parameter and gradient shards, all in pinned host memory; nothing on the device.
  file = writeConfig(spec, rungs[6]);
  p = predict(spec, rungs[6], file);
  CHECK(p.bytes.modelStates(MemPlace::Device) == 0);
  CHECK(p.bytes.get(MemTag::OptimizerState, MemPlace::PinnedHost) == 12 * roundUp(psi, 64) / 2);
  CHECK(p.bytes.hostModelStates() == (4 + 4 + 12) * roundUp(psi, 64) / 2);
  // NVMe: the optimizer state in swap files and, with max_in_cpu 0, the whole parameter shard
  // read through pinned buffers from the fp32 master weights' file (both tiers on spec's one
  // nvme_path), which holds the same values: no parameter bytes of its own anywhere.
  file = writeConfig(spec, rungs[7]);
  p = predict(spec, rungs[7], file);
  CHECK(p.bytes.get(MemTag::OptimizerState, MemPlace::Nvme) == 12 * roundUp(psi, 64) / 2);
  CHECK(p.bytes.get(MemTag::Parameters, MemPlace::Nvme) == 0);
  CHECK(p.bytes.get(MemTag::Parameters, MemPlace::PinnedHost) == 0);
  CHECK(p.bytes.get(MemTag::Parameters, MemPlace::Host) == 0);
  CHECK(p.bytes.get(MemTag::SwapBuffers, MemPlace::PinnedHost) > 0);
  std::filesystem::remove(file);
}
