// --init-from under Hugging Face's names (tools/trainer/hf_weights.h): the names mapped against
// the GPT-2 registration written out by hand. Engine::loadWeights reading a file through such a
// rename is checkpoint_faults_test's; the trainer's run of it is trainer_checkpoints'.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "hf_weights.h"

using namespace zrt::trainer;

namespace {

const std::vector<RegisteredName> kGpt2 = {
    {"embed", "wte.weight"}, {"embed", "wpe.weight"}, {"h.0", "h.0.ln_1.weight"},
    {"h.0", "h.0.mlp.c_proj.bias"}, {"ln_f", "ln_f.weight"}, {"ln_f", "ln_f.bias"}};

}  // namespace

TEST_CASE("names: Hugging Face's (with or without transformer.) map to <module>.<param>") {
  const HfNames rename(kGpt2);
  CHECK(rename("wte.weight") == "embed.wte.weight");
  CHECK(rename("h.0.ln_1.weight") == "h.0.h.0.ln_1.weight");
  CHECK(rename("transformer.ln_f.bias") == "ln_f.ln_f.bias");
  CHECK(rename("transformer.h.0.mlp.c_proj.bias") == "h.0.h.0.mlp.c_proj.bias");
  // The engine's own names stay; an unknown name is kept for loadWeights to list.
  CHECK(rename("embed.wpe.weight") == "embed.wpe.weight");
  CHECK(rename("lm_head.weight") == "lm_head.weight");
  CHECK(rename("transformer.lm_head.weight") == "transformer.lm_head.weight");
}
