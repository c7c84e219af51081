// --json-log's file (tools/trainer/json_log.h): records land one per line; a write that fails
// (/dev/full: every write is ENOSPC) is remembered with the file's name and the reason, and later
// records are dropped; a file that cannot be opened names --json-log.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "json_log.h"

using namespace zrt::trainer;

TEST_CASE("records are written one per line") {
  const auto path = (std::filesystem::temp_directory_path() / "zrt_trainer_json_log.jsonl").string();
  {
    JsonLog log(path);
    CHECK(log.isOpen());
    log.write(R"({"step": 1})");
    log.write(R"({"step": 2})");
    log.close();
    CHECK_FALSE(log.failed());
    CHECK(log.error().empty());
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "{\"step\": 1}\n{\"step\": 2}\n");
  std::filesystem::remove(path);
}

TEST_CASE("a failed write is remembered, naming the file and the reason") {
  if (!std::filesystem::exists("/dev/full")) return;  // Linux's always-full device
  JsonLog log("/dev/full");
  log.write(R"({"step": 1})");
  CHECK(log.failed());
  CHECK(log.error() == "--json-log /dev/full: write failed after 0 records (No space left on device)");
  log.write(R"({"step": 2})");  // dropped, the first error kept
  log.close();
  CHECK(log.error() == "--json-log /dev/full: write failed after 0 records (No space left on device)");
}

TEST_CASE("a closed log writes nothing and has not failed") {
  JsonLog log;
  CHECK_FALSE(log.isOpen());
  log.write("{}");
  log.close();
  CHECK_FALSE(log.failed());
}

TEST_CASE("a log that cannot be opened names --json-log and the file") {
  std::string message;
  try {
    JsonLog log("/nonexistent/dir/log.jsonl");
  } catch (const zrt::InvalidArgument& e) {
    message = e.what();
  }
  CHECK(message.find("--json-log /nonexistent/dir/log.jsonl: cannot open for writing (No such file or directory)") !=
        std::string::npos);
}
