// The pieces under the config reader: edit distance and suggestions, text positions, JSON
// parsing with line/column errors and duplicate keys.
#include <doctest/doctest.h>

#include "core/config/json_text.h"
#include "core/config/key_suggestion.h"
#include "tests/config/config_test_util.h"

using namespace zrt;
using zrt::test::contains;

TEST_CASE("edit distance counts insertions, deletions and substitutions") {
  CHECK(editDistance("", "") == 0);
  CHECK(editDistance("abc", "") == 3);
  CHECK(editDistance("", "abc") == 3);
  CHECK(editDistance("nvme_pth", "nvme_path") == 1);
  CHECK(editDistance("kitten", "sitting") == 3);
  CHECK(editDistance("stage", "stage") == 0);
  CHECK(editDistance("queue_dept", "queue_depth") == 1);
}

TEST_CASE("the nearest key is suggested only when it is a plausible typo") {
  std::vector<std::string> keys = {"device", "nvme_path", "pin_memory", "buffer_count"};
  CHECK(nearestKey("nvme_pth", keys) == "nvme_path");
  CHECK(nearestKey("pin_memroy", keys) == "pin_memory");
  CHECK(nearestKey("devise", keys) == "device");
  CHECK(nearestKey("completely_different", keys) == "");
  CHECK(nearestKey("x", {}) == "");
}

TEST_CASE("text positions are 1-based lines and columns") {
  std::string text = "ab\ncde\n\nf";
  CHECK(textPosition(text, 0).line == 1);
  CHECK(textPosition(text, 0).column == 1);
  CHECK(textPosition(text, 1).column == 2);
  CHECK(textPosition(text, 3).line == 2);
  CHECK(textPosition(text, 3).column == 1);
  CHECK(textPosition(text, 5).column == 3);
  CHECK(textPosition(text, 7).line == 3);
  CHECK(textPosition(text, 8).line == 4);
  CHECK(textPosition(text, 100).line == 4);  // clamped to the end
  CHECK(textPosition(text, 100).column == 2);
}

TEST_CASE("malformed JSON reports line and column of the offending character") {
  struct Case {
    const char* text;
    std::size_t line, column;
  };
  // Positions counted by hand: the last character of the token where the parser gives up.
  Case cases[] = {
      {"{\"a\": 1,}", 1, 9},                                      // '}' where a key belongs
      {"{\n  \"fp16\": {\n    \"enabled\" true\n  }\n}", 3, 18},  // "true" where ':' belongs
      {"{\n  \"a\": 1\n  \"b\": 2\n}", 3, 5},                     // "\"b\"" where ',' belongs
      {"{\n\t\"a\": [1, 2,, 3]\n}", 2, 13},                       // a tab counts as one column
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    try {
      parseJsonText(c.text, "f.json");
      FAIL_CHECK("parsed");
    } catch (const ConfigError& e) {
      std::string want = detail::cat("line ", c.line, ", column ", c.column);
      CHECK_MESSAGE(contains(e.what(), want), e.what());
      CHECK(contains(e.what(), "f.json"));
      CHECK(contains(e.what(), "malformed JSON"));
      CHECK(contains(e.what(), "^"));
    }
  }
}

TEST_CASE("end of input and empty files are malformed") {
  for (const char* text : {"", "{", "{\"zero_optimization\": {\"stage\": 2}"}) {
    CAPTURE(text);
    CHECK_THROWS_AS(parseJsonText(text, "f.json"), ConfigError);
  }
}

TEST_CASE("comments are allowed, as DeepSpeed's hjson loader allows them") {
  auto j = parseJsonText("{\n  // ZeRO\n  \"a\": 1 /* one */\n}", "f.json");
  CHECK(j["a"] == 1);
}

TEST_CASE("a key given twice in one object is an error naming its path") {
  try {
    parseJsonText("{\"zero_optimization\": {\"stage\": 2, \"stage\": 3}}", "dup.json");
    FAIL_CHECK("parsed");
  } catch (const ConfigError& e) {
    CHECK(e.path() == "zero_optimization.stage");
    CHECK(contains(e.what(), "dup.json"));
    CHECK(contains(e.what(), "twice"));
  }
  // The same key in different objects is fine.
  CHECK_NOTHROW(parseJsonText(
      "{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}, \"c\": [{\"x\": 1}, {\"x\": 2}]}", "ok.json"));
}

TEST_CASE("a number beyond a double is malformed JSON with its line and column (found by fuzz_config)") {
  // nlohmann throws out_of_range, not parse_error, for it; it once escaped the reader untranslated.
  try {
    parseJsonText("{\n  \"gradient_clipping\": 1e309\n}", "big.json");
    FAIL_CHECK("parsed");
  } catch (const ConfigError& e) {
    CHECK_MESSAGE(contains(e.what(), "big.json: malformed JSON at line 2, column 24: number 1e309 is beyond the range of a double"),
                  e.what());
    CHECK(contains(e.what(), "^"));
  }
  CHECK_THROWS_AS(parseJsonText("[-1e400]", "f.json"), ConfigError);
}
