// The checkpoint file readers on numbers a corrupt or crafted file may hold: every integer of a
// manifest and of a safetensors header must be a JSON integer in its type's range. nlohmann's
// get<int>() had converted 1e300 (undefined behaviour, which UBSan reports in the fuzz build) and
// 4294967297 (read as 1) without a word.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/checkpoint/json_integer.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"

using namespace zrt;
using namespace zrt::checkpoint;
using nlohmann::json;

namespace {

// A valid two-rank manifest: one parameter of 6 elements, "params" in two files.
json validManifest() {
  Manifest m;
  m.tag = "t";
  m.worldSize = 2;
  m.stage = 1;
  m.optimizer = "sgd";
  m.trainableNumel = 6;
  m.params.push_back({"mod", "w", {2, 3}, true, 0, 0, 6});
  m.states.push_back({"params", true, DType::F32, 6});
  m.files.push_back({"params.0", "params", 0, 0, 3, 12, 1});
  m.files.push_back({"params.1", "params", 1, 3, 3, 12, 2});
  return toJson(m);
}

std::string refusal(const json& j) {
  try {
    manifestFromJson(j, "m.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  FAIL_CHECK("accepted: " << j.dump());
  return "";
}

}  // namespace

TEST_CASE("exactInteger takes JSON integers inside the type's range and nothing else") {
  CHECK(exactInteger<int>(json(7)) == 7);
  CHECK(exactInteger<int>(json::parse("-5")) == -5);
  CHECK(exactInteger<int>(json::parse("2147483647")) == 2147483647);
  CHECK_FALSE(exactInteger<int>(json::parse("2147483648")));
  CHECK_FALSE(exactInteger<int>(json::parse("4294967297")));
  CHECK_FALSE(exactInteger<int>(json::parse("1e300")));
  CHECK_FALSE(exactInteger<int>(json::parse("2.0")));
  CHECK_FALSE(exactInteger<int>(json("3")));
  CHECK(exactInteger<std::uint64_t>(json::parse("18446744073709551615")) == UINT64_MAX);
  CHECK_FALSE(exactInteger<std::uint64_t>(json::parse("-1")));
  CHECK_FALSE(exactInteger<std::uint64_t>(json(-1)));
  CHECK(exactInteger<std::int64_t>(json::parse("-9223372036854775808")) == INT64_MIN);
  CHECK_FALSE(exactInteger<std::int64_t>(json::parse("9223372036854775808")));
  CHECK(exactIntegers<std::int64_t>(json::parse("[1, 0, 4]")) == std::vector<std::int64_t>{1, 0, 4});
  CHECK_FALSE(exactIntegers<std::int64_t>(json::parse("[1, 0.5]")));
  CHECK_FALSE(exactIntegers<std::int64_t>(json::parse("{}")));
}

TEST_CASE("a manifest whose integers are floats, negative or out of range is refused naming the key") {
  CHECK_NOTHROW(manifestFromJson(validManifest(), "m.json"));
  SUBCASE("world_size 1e300") {
    json j = validManifest();
    j["world_size"] = 1e300;
    const std::string e = refusal(j);
    CHECK_MESSAGE(e.find("m.json: key 'world_size' is 1e+300, not an integer from -2147483648 to 2147483647") !=
                      std::string::npos, e);
  }
  SUBCASE("world_size 2^32 + 2, which get<int>() read as 2") {
    json j = validManifest();
    j["world_size"] = 4294967298ull;
    CHECK(refusal(j).find("key 'world_size' is 4294967298") != std::string::npos);
  }
  SUBCASE("a file's begin -1") {
    json j = validManifest();
    j["files"][0]["begin"] = -1;
    CHECK(refusal(j).find("key 'begin' is -1, not an integer from 0 to 18446744073709551615") != std::string::npos);
  }
  SUBCASE("a rank of 0.5") {
    json j = validManifest();
    j["files"][1]["rank"] = 0.5;
    CHECK(refusal(j).find("key 'rank' is 0.5") != std::string::npos);
  }
  SUBCASE("a shape with a float") {
    json j = validManifest();
    j["parameters"][0]["shape"] = json::parse("[2, 3.0]");
    CHECK(refusal(j).find("key 'shape' is not an array of integers") != std::string::npos);
  }
}

TEST_CASE("a safetensors header with float or negative numbers is refused naming the tensor") {
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/zrt-safetensors-test-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove{dir};
  auto write = [&](const std::string& header, std::size_t dataBytes) {
    const std::string path = dir + "/f.safetensors";
    std::filesystem::remove(path);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(dataBytes, '\0');
    return path;
  };
  CHECK(SafetensorsReader(write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)).tensors().size() == 1);
  CHECK_THROWS_WITH_AS(SafetensorsReader(write(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8)),
                       doctest::Contains("tensor 'w': shape is not an array of integers"), InvalidArgument);
  CHECK_THROWS_WITH_AS(SafetensorsReader(write(R"({"w":{"dtype":"F32","shape":[1e300],"data_offsets":[0,8]}})", 8)),
                       doctest::Contains("tensor 'w': shape is not an array of integers"), InvalidArgument);
  CHECK_THROWS_WITH_AS(SafetensorsReader(write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8)),
                       doctest::Contains("tensor 'w': data_offsets is not [begin, end]"), InvalidArgument);
  CHECK_THROWS_WITH_AS(SafetensorsReader(write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}})", 8)),
                       doctest::Contains("tensor 'w': data_offsets is not [begin, end]"), InvalidArgument);
}
