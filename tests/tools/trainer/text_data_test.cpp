// The text split (tools/trainer/text_data.h): floor(0.9 * length) training bytes, and the errors
// that name --data and the file.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "text_data.h"

using namespace zrt::trainer;

namespace {

std::string writeTemp(const std::string& name, std::size_t bytes) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream out(path, std::ios::binary);
  for (std::size_t i = 0; i < bytes; ++i) out.put(static_cast<char>('a' + i % 26));
  return path.string();
}

std::string messageOf(const std::string& path, int seqLen) {
  try {
    loadText(path, seqLen);
  } catch (const zrt::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("training takes floor(0.9 * length) bytes") {
  // 0.9 * length by hand, including lengths where 0.9 in floating point would round down wrong.
  CHECK(trainSplit(0) == 0);
  CHECK(trainSplit(9) == 8);
  CHECK(trainSplit(10) == 9);
  CHECK(trainSplit(11) == 9);
  CHECK(trainSplit(19) == 17);
  CHECK(trainSplit(35149) == 31634);
  CHECK(trainSplit(1'000'000'000'007) == 900'000'000'006);
}

TEST_CASE("a file splits into its first 90% and the rest") {
  const std::string path = writeTemp("zrt_trainer_text_100", 100);
  const TextData d = loadText(path, 8);
  CHECK(d.bytes.size() == 100);
  CHECK(d.train().size() == 90);
  CHECK(d.validation().size() == 10);
  CHECK(d.train()[0] == 'a');
  CHECK(d.validation()[0] == 'a' + 90 % 26);
  std::filesystem::remove(path);
}

TEST_CASE("a missing file and a file too short for one sample name --data and the file") {
  const std::string missing = messageOf("/nonexistent/zrt-train-data.txt", 8);
  CHECK(missing.find("--data /nonexistent/zrt-train-data.txt") != std::string::npos);
  CHECK(missing.find("cannot open") != std::string::npos);

  // 100 bytes: 10 validation bytes hold a sample of T only while 10 - T - 1 > 0, so T = 8 works
  // and T = 9 does not.
  const std::string path = writeTemp("zrt_trainer_text_short", 100);
  CHECK(messageOf(path, 8).empty());
  const std::string tooShort = messageOf(path, 9);
  CHECK(tooShort.find("--data " + path) != std::string::npos);
  CHECK(tooShort.find("--seq-len 9") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("a directory given as --data is named as one, with the flag and the path") {
  const auto dir = std::filesystem::temp_directory_path() / "zrt_trainer_text_dir";
  std::filesystem::create_directories(dir);
  const std::string message = messageOf(dir.string(), 8);
  CHECK(message.find("--data " + dir.string() + ": is a directory") != std::string::npos);
  CHECK(message.find("basic_filebuf") == std::string::npos);
  std::filesystem::remove(dir);
}
