// --init-from under Hugging Face's names (tools/trainer/hf_weights.h): the names mapped against
// the GPT-2 registration written out by hand, and a renamed copy that holds the same bytes.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "hf_weights.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors.h"

using namespace zrt::trainer;
namespace ck = zrt::checkpoint;

namespace {

const std::vector<RegisteredName> kGpt2 = {
    {"embed", "wte.weight"}, {"embed", "wpe.weight"}, {"h.0", "h.0.ln_1.weight"},
    {"h.0", "h.0.mlp.c_proj.bias"}, {"ln_f", "ln_f.weight"}, {"ln_f", "ln_f.bias"}};

}  // namespace

TEST_CASE("names: Hugging Face's (with or without transformer.) map to <module>.<param>") {
  CHECK(engineNames({"wte.weight", "h.0.ln_1.weight", "transformer.ln_f.bias"}, kGpt2) ==
        std::vector<std::string>{"embed.wte.weight", "h.0.h.0.ln_1.weight", "ln_f.ln_f.bias"});
  // The engine's own names stay; an unknown name is kept for loadWeights to list.
  CHECK(engineNames({"embed.wpe.weight", "lm_head.weight"}, kGpt2) ==
        std::vector<std::string>{"embed.wpe.weight", "lm_head.weight"});
}

TEST_CASE("a file under Hugging Face's names is copied renamed, bytes unchanged; the engine's is read as is") {
  const std::string dir = ck::makeTempDirectory("/tmp", "zrt-hf-weights-test-");
  const std::string hf = dir + "/hf.safetensors";
  std::vector<ck::SafetensorsTensor> ts(2);
  ts[0].name = "wte.weight";
  ts[0].dtype = zrt::DType::F32;
  ts[0].shape = {2, 3};
  ts[1].name = "transformer.h.0.ln_1.weight";
  ts[1].dtype = zrt::DType::BF16;
  ts[1].shape = {4};
  const float wte[6] = {1.5f, -2.25f, 3, 0.125f, -0.0f, 1e-30f};
  const std::uint16_t ln[4] = {0x3f80, 0xbf80, 0x0001, 0x7f7f};
  {
    ck::SafetensorsWriter w(hf, ts, {{"format", "pt"}});
    w.write(wte, sizeof wte);
    w.write(ln, sizeof ln);
    w.finish();
  }
  std::string copyDir;
  {
    const WeightsForEngine w(hf, kGpt2);
    REQUIRE(w.renamed());
    copyDir = w.path().substr(0, w.path().rfind('/'));
    const ck::SafetensorsReader r(w.path());
    REQUIRE(r.tensors().size() == 2);
    const ck::SafetensorsTensor* a = r.find("embed.wte.weight");
    const ck::SafetensorsTensor* b = r.find("h.0.h.0.ln_1.weight");
    REQUIRE(a);
    REQUIRE(b);
    CHECK(b->dtype == zrt::DType::BF16);
    CHECK(b->shape == std::vector<std::int64_t>{4});
    float gotWte[6];
    std::uint16_t gotLn[4];
    r.read(*a, 0, 6, zrt::DType::F32, gotWte);
    r.read(*b, 0, 4, zrt::DType::BF16, gotLn);
    CHECK(std::memcmp(gotWte, wte, sizeof wte) == 0);
    CHECK(std::memcmp(gotLn, ln, sizeof ln) == 0);
    CHECK(r.metadata().at("format") == "pt");
  }
  CHECK_FALSE(ck::pathExists(copyDir));  // removed with the object

  const std::string own = dir + "/own.safetensors";
  ts.resize(1);
  ts[0].name = "embed.wte.weight";
  {
    ck::SafetensorsWriter w(own, ts, {});
    w.write(wte, sizeof wte);
    w.finish();
  }
  const WeightsForEngine same(own, kGpt2);
  CHECK_FALSE(same.renamed());
  CHECK(same.path() == own);
  const WeightsForEngine directory(dir, kGpt2);
  CHECK(directory.path() == dir);
  CHECK(ck::removeTree(dir).empty());
}
