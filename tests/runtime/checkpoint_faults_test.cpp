// Bad input and faults: a truncated file, a flipped byte, a missing shard, a manifest from
// another world size, a wrong format version, and a model that differs (every difference
// named) are each refused on every rank with an error naming the file, before the engine's
// state is touched and without changing the checkpoint. A disk that fills up during a save (an
// injected ENOSPC on one rank) fails the save on every rank, leaves the previous checkpoint and
// `latest` intact and removes the temporary directory (a real full disk, a tmpfs, is
// checkpoint_full_disk_test). Weights-only loading from a checkpoint and from a safetensors file
// built here byte by byte (the independent reference), also under other names through a rename.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/fault_injection.h"
#include "tests/runtime/checkpoint_test_support.h"

using namespace zrt;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMicro = 2;

// A copy of checkpoint `from` as `to`, on rank 0; then `edit` runs there.
template <class Edit>
void copyAndEdit(const std::string& from, const std::string& to, Edit edit) {
  if (test::worldRank() == 0) {
    fs::copy(from, to, fs::copy_options::recursive);
    edit(to);
  }
  MPI_Barrier(test::testComm());
}

void flipByte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x10));
}

nlohmann::json readJson(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

void writeJson(const std::string& p, const nlohmann::json& j) {
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(p, std::ios::trunc) << j.dump(1);
}

// A safetensors file, byte by byte, on rank 0: u64 little-endian header length, the JSON header,
// the raw data.
void writeSafetensors(const std::string& path, const nlohmann::json& header, const std::string& data) {
  if (test::worldRank() == 0) {
    const std::string h = header.dump();
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = h.size();
    for (int k = 0; k < 8; ++k) out.put(static_cast<char>((n >> (8 * k)) & 0xff));
    out << h << data;
  }
  MPI_Barrier(test::testComm());
}

// Every parameter of every module (models here differ in how many a module has).
std::vector<std::vector<float>> allValues(const Engine& engine) {
  std::vector<std::vector<float>> out;
  for (std::size_t m = 0; m < engine.numModules(); ++m)
    for (std::size_t i = 0;; ++i) {
      try {
        out.push_back(engine.parameterValues(m, i));
      } catch (const std::out_of_range&) {
        break;
      }
    }
  return out;
}

// The load fails with every fragment in its message, and the engine's parameters are unchanged.
void expectLoadFails(Engine& engine, const std::string& dir, const std::string& tag,
                     const std::vector<std::string>& fragments) {
  const auto before = allValues(engine);
  std::string message;
  try {
    engine.load(dir, tag);
  } catch (const Error& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK(!message.empty());
  for (const std::string& f : fragments) CHECK(message.find(f) != std::string::npos);
  CHECK(test::sameBits(before, allValues(engine)));
}

std::vector<std::string> fileHashes(const std::string& dir) {
  std::vector<std::string> out;
  const checkpoint::CheckpointReader r(dir);
  for (std::size_t i = 0; i < r.manifest().files.size(); ++i) out.push_back(r.verifyFile(i));
  return out;
}

}  // namespace

TEST_CASE("damaged checkpoints are refused naming the file; nothing is overwritten") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  {
    test::TestEngine saver(comm, 1, kMicro, 1, DType::BF16);
    test::train(saver.engine, comm, 3, kMicro);
    saver.engine.save(dir.path(), "good");
  }
  const std::string good = dir / "good";
  const std::string last = detail::cat(".rank", comm.size() == 1 ? "00000" : "00001", ".bin");
  copyAndEdit(good, dir / "truncated", [&](const std::string& d) { fs::resize_file(d + "/params" + last, fs::file_size(d + "/params" + last) - 4); });
  copyAndEdit(good, dir / "flipped", [&](const std::string& d) { flipByte(d + "/exp_avg.rank00000.bin", 10); });
  copyAndEdit(good, dir / "missing", [&](const std::string& d) { fs::remove(d + "/master" + last); });
  copyAndEdit(good, dir / "version", [&](const std::string& d) {
    auto j = readJson(d + "/manifest.json");
    j["format_version"] = 99;
    writeJson(d + "/manifest.json", j);
  });
  // The manifest of a save on another world size, over these files.
  {
    test::SubWorld other(1);
    if (other.get() && comm.size() > 1) {
      test::TestEngine saver(*other.get(), 1, kMicro * comm.size(), 1, DType::BF16);
      saver.engine.save(dir.path(), "world1");
    }
  }
  MPI_Barrier(test::testComm());
  if (comm.size() > 1)
    copyAndEdit(good, dir / "otherworld", [&](const std::string& d) {
      fs::remove(d + "/manifest.json");
      fs::copy_file(dir / "world1/manifest.json", d + "/manifest.json");
    });

  test::TestEngine loader(comm, 3, kMicro, 1, DType::BF16);
  expectLoadFails(loader.engine, dir.path(), "truncated", {"params" + last, "truncated", "nothing was loaded"});
  expectLoadFails(loader.engine, dir.path(), "flipped", {"exp_avg.rank00000.bin", "checksum"});
  expectLoadFails(loader.engine, dir.path(), "missing", {"master" + last, "missing"});
  expectLoadFails(loader.engine, dir.path(), "version", {"version/manifest.json", "format version 99"});
  if (comm.size() > 1) expectLoadFails(loader.engine, dir.path(), "otherworld", {"params.rank00000.bin", "bytes"});
  expectLoadFails(loader.engine, dir.path(), "absent", {"absent/manifest.json", "does not exist"});
  // The good checkpoint is untouched and still loads.
  if (comm.rank() == 0)
    for (const std::string& problem : fileHashes(good)) CHECK(problem == "");
  loader.engine.load(dir.path(), "good");
}

TEST_CASE("a model that differs is refused naming every difference") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  {
    test::TestEngine saver(comm, 2, kMicro, 1, DType::F32);
    saver.engine.save(dir.path(), "base");
  }
  EngineModel changed = test::testModel(0.02);
  changed.modules[1].params[2].name = "beta";                 // renamed: missing + extra
  changed.modules[2].params[0].shape = {4, 16};               // same size, another shape
  changed.modules[0].params.push_back({"gain", {8}, init::constant(1.0f), true, 0});  // extra here
  changed.modules[2].params.erase(changed.modules[2].params.begin() + 1);             // gone here
  {
    test::TestEngine t(comm, 2, kMicro, 1, DType::F32, changed);
    expectLoadFails(t.engine, dir.path(), "base",
                    {"7 differences", "registered in another order", "'layer1/beta' [8]: missing from the checkpoint",
                     "'layer1/bias' [8]: in the checkpoint, not in this model",
                     "'layer2/weight': shape [8,8] in the checkpoint, [4,16] in this model",
                     "'layer0/gain' [8]: missing from the checkpoint",
                     "'layer2/scale' [8]: in the checkpoint, not in this model"});
  }
  {
    test::TestEngine t(comm, 2, kMicro, 1, DType::BF16);
    expectLoadFails(t.engine, dir.path(), "base", {"training dtype: fp32 in the checkpoint, bf16 in this engine"});
  }
  {
    test::TestEngine t(comm, 2, kMicro, 1, DType::F32, test::testModel(0.02), /*sgd=*/true);
    expectLoadFails(t.engine, dir.path(), "base", {"optimizer state: [exp_avg, exp_avg_sq] (adam) in the checkpoint, "
                                                   "[momentum_buffer] (sgd) in this engine"});
  }
  {
    EngineModel frozen = test::testModel(0.02);
    frozen.modules[0].params[0].trainable = false;
    test::TestEngine t(comm, 2, kMicro, 1, DType::F32, frozen);
    expectLoadFails(t.engine, dir.path(), "base", {"'layer0/weight': trainable in the checkpoint, frozen in this model"});
  }
}

TEST_CASE("weights only, from a checkpoint (any dtype) and from a safetensors file written by hand") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  std::vector<std::vector<float>> trained;
  {
    test::TestEngine saver(comm, 1, kMicro, 1, DType::BF16);
    test::train(saver.engine, comm, 3, kMicro);
    trained = test::trainedValues(saver.engine);
    saver.engine.save(dir.path(), "bf16");
  }
  SUBCASE("same dtype, stage 3: the trained values exactly") {
    test::TestEngine t(comm, 3, kMicro, 1, DType::BF16);
    t.engine.loadWeights(dir.path());  // through latest
    CHECK(test::sameBits(test::trainedValues(t.engine), trained));
  }
  SUBCASE("into fp32: the fp32 master weights, which round to the trained bf16 values") {
    test::TestEngine t(comm, 0, kMicro, 1, DType::F32);
    t.engine.loadWeights(dir / "bf16");
    const auto got = test::trainedValues(t.engine);
    bool rounds = true, finer = false;
    for (std::size_t i = 0; i < got.size(); ++i)
      for (std::size_t k = 0; k < got[i].size(); ++k) {
        rounds = rounds && bf16ToFloat(floatToBf16(got[i][k])) == trained[i][k];
        finer = finer || got[i][k] != trained[i][k];
      }
    CHECK(rounds);
    CHECK(finer);
  }
  SUBCASE("safetensors: F32 and BF16 tensors, named <module>.<param>") {
    // The file's tensors, byte by byte.
    std::vector<float> values;
    nlohmann::json header;
    std::string data;
    std::vector<std::vector<float>> expect;
    for (int l = 0; l < test::kLayers; ++l) {
      for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{{"weight", 64}, {"scale", 8}, {"bias", 8}}) {
        const bool bf = name == "bias";
        std::vector<float> v;
        for (int i = 0; i < n; ++i) v.push_back(bf16ToFloat(floatToBf16(0.01f * (i + 1) * (l + 1) - 0.3f)));
        const std::size_t begin = data.size();
        for (float x : v) {
          if (bf) {
            const std::uint16_t b = floatToBf16(x);
            data.push_back(static_cast<char>(b & 0xff));
            data.push_back(static_cast<char>(b >> 8));
          } else {
            std::uint32_t u;
            std::memcpy(&u, &x, 4);
            for (int k = 0; k < 4; ++k) data.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
          }
        }
        nlohmann::json shape = name == "weight" ? nlohmann::json{8, 8} : nlohmann::json{8};
        header["layer" + std::to_string(l) + "." + name] = {{"dtype", bf ? "BF16" : "F32"}, {"shape", shape},
                                                            {"data_offsets", {begin, data.size()}}};
        if (name != "scale") expect.push_back(v);
      }
    }
    const std::string file = dir / "model.safetensors";
    writeSafetensors(file, header, data);
    test::TestEngine t(comm, 2, kMicro, 1, DType::F32);
    t.engine.loadWeights(file);
    CHECK(test::sameBits(test::trainedValues(t.engine), expect));
    // A model with a tensor the file lacks names it.
    EngineModel more = test::testModel(0.02);
    more.modules[0].params.push_back({"gain", {8}, init::constant(1.0f), true, 0});
    test::TestEngine m(comm, 2, kMicro, 1, DType::F32, more);
    CHECK_THROWS_WITH_AS(m.engine.loadWeights(file), doctest::Contains("'layer0.gain' [8]: missing from the safetensors file"),
                         InvalidArgument);
    // Named as one that may be missing (a LoRA adapter over a base model's weights), it keeps its
    // initial value and the rest load; any other missing tensor is still refused.
    m.engine.loadWeights(file, {"layer0/gain"});
    CHECK(test::sameBits(test::trainedValues(m.engine), expect));
    CHECK(m.engine.parameterValues(0, 3) == std::vector<float>(8, 1.0f));
    more.modules[1].params.push_back({"gain", {8}, init::constant(1.0f), true, 0});
    test::TestEngine two(comm, 2, kMicro, 1, DType::F32, more);
    CHECK_THROWS_WITH_AS(two.engine.loadWeights(file, {"layer0/gain"}),
                         doctest::Contains("'layer1.gain' [8]: missing from the safetensors file"), InvalidArgument);

    // The same tensors under other names ("model.layer0.weight"), read in place through a rename.
    nlohmann::json foreign;
    for (const auto& [name, entry] : header.items()) foreign["model." + name] = entry;
    const std::string renamedFile = dir / "foreign.safetensors";
    writeSafetensors(renamedFile, foreign, data);
    auto dropModel = [](const std::string& n) { return n.rfind("model.", 0) == 0 ? n.substr(6) : n; };
    test::TestEngine r(comm, 3, kMicro, 1, DType::F32);
    CHECK_THROWS_WITH_AS(r.engine.loadWeights(renamedFile),
                         doctest::Contains("'model.layer0.weight' [8,8]: in the safetensors file, not in this model"),
                         InvalidArgument);
    r.engine.loadWeights(renamedFile, {}, dropModel);
    CHECK(test::sameBits(test::trainedValues(r.engine), expect));
    // Two tensors renamed onto one parameter: refused, naming both, before anything is loaded.
    test::TestEngine d(comm, 3, kMicro, 1, DType::F32);
    const auto before = allValues(d.engine);
    auto clash = [](const std::string& n) { return n == "model.layer1.bias" ? std::string("layer0.bias") : n.substr(6); };
    CHECK_THROWS_WITH_AS(d.engine.loadWeights(renamedFile, {}, clash),
                         doctest::Contains("'model.layer0.bias' and 'model.layer1.bias' are both renamed to 'layer0.bias'"),
                         InvalidArgument);
    CHECK(allValues(d.engine) == before);
  }
  SUBCASE("a checkpoint lacking a parameter named as one that may be missing") {
    EngineModel more = test::testModel(0.02);
    more.modules[2].params.push_back({"gain", {8}, init::constant(0.5f), true, 0});
    test::TestEngine m(comm, 3, kMicro, 1, DType::BF16, more);
    CHECK_THROWS_WITH_AS(m.engine.loadWeights(dir / "bf16"), doctest::Contains("'layer2/gain' [8]: missing from the checkpoint"),
                         InvalidArgument);
    m.engine.loadWeights(dir / "bf16", {"layer2/gain"});
    CHECK(test::sameBits(test::trainedValues(m.engine), trained));
    CHECK(m.engine.parameterValues(2, 3) == std::vector<float>(8, 0.5f));
  }
}

TEST_CASE("metadata: the program's JSON object stored verbatim; none is an empty object, also in older manifests") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  test::TestEngine t(comm, 3, kMicro, 1, DType::F32);
  const nlohmann::json meta = {{"lora", {{"r", 8}, {"lora_alpha", 16.0}, {"target_modules", {"c_attn"}}}},
                               {"note", "any JSON"}};
  t.engine.save(dir.path(), "with", meta);
  t.engine.save(dir.path(), "without");
  CHECK(checkpoint::CheckpointReader(dir / "with").manifest().metadata == meta);
  CHECK(checkpoint::CheckpointReader(dir / "without").manifest().metadata == nlohmann::json::object());
  // A manifest written before the key existed reads as an empty object; a non-object is refused.
  copyAndEdit(dir / "without", dir / "old", [](const std::string& d) {
    nlohmann::json j = readJson(d + "/manifest.json");
    j.erase("metadata");
    writeJson(d + "/manifest.json", j);
  });
  CHECK(checkpoint::CheckpointReader(dir / "old").manifest().metadata == nlohmann::json::object());
  t.engine.load(dir.path(), "old");
  copyAndEdit(dir / "without", dir / "bad", [](const std::string& d) {
    nlohmann::json j = readJson(d + "/manifest.json");
    j["metadata"] = {1, 2};
    writeJson(d + "/manifest.json", j);
  });
  CHECK_THROWS_WITH_AS(checkpoint::CheckpointReader(dir / "bad"), doctest::Contains("key 'metadata' is not a JSON object"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(t.engine.save(dir.path(), "array", nlohmann::json::array()),
                       doctest::Contains("metadata must be a JSON object"), InvalidArgument);
}

TEST_CASE("disk full during a save: an error on every rank, the previous checkpoint intact, no temporary directory") {
  comm::MpiCommunicator comm(MPI_COMM_WORLD);
  test::SharedTempDir dir;
  test::TestEngine t(comm, 2, kMicro, 1, DType::F16);
  test::train(t.engine, comm, 2, kMicro);
  t.engine.save(dir.path(), "before");
  const auto before = test::trainedValues(t.engine);
  test::train(t.engine, comm, 1, kMicro);
  for (int at : {1, 3}) {
    CAPTURE(at);
    // Only the last rank's at-th write fails: the others must not wait for it, and all throw.
    checkpoint::setFaultPlanForTesting(comm.rank() == comm.size() - 1
                                           ? checkpoint::FaultPlan{checkpoint::FaultKind::NoSpace, at}
                                           : checkpoint::FaultPlan{});
    CHECK_THROWS_WITH_AS(t.engine.save(dir.path(), "after"), doctest::Contains("No space left on device"), IoError);
    checkpoint::setFaultPlanForTesting({});
    if (comm.rank() == 0) {
      CHECK(checkpoint::resolveTag(dir.path(), "") == "before");
      for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
      CHECK_FALSE(fs::exists(dir / "after"));
      for (const std::string& problem : fileHashes(dir / "before")) CHECK(problem == "");
    }
  }
  test::TestEngine fresh(comm, 2, kMicro, 1, DType::F16);
  fresh.engine.load(dir.path(), "");
  CHECK(test::sameBits(test::trainedValues(fresh.engine), before));
  // Once there is space again, the save goes through.
  t.engine.save(dir.path(), "after");
}
