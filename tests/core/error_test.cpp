#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

using namespace zrt;

TEST_CASE("ZRT_ENFORCE_EQ reports file:line, the expression and both values") {
  int a = 3, b = 4;
  try {
    ZRT_ENFORCE_EQ(a, b, "while testing");
    FAIL("no throw");
  } catch (const Error& e) {
    std::string w = e.what();
    CHECK(w.find("error_test.cpp:") != std::string::npos);
    CHECK(w.find("a == b") != std::string::npos);
    CHECK(w.find("3 vs 4") != std::string::npos);
    CHECK(w.find("while testing") != std::string::npos);
  }
}

TEST_CASE("messages carry the rank once it is known") {
  setProcessRank(5);
  try {
    ZRT_THROW(IoError, "x");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).rfind("[rank 5] ", 0) == 0);
  } catch (...) {
    FAIL("wrong type");
  }
  setProcessRank(-1);
  CHECK_THROWS_AS(ZRT_ENFORCE(false), Error);
  CHECK_NOTHROW(ZRT_ENFORCE(true, "never printed"));
}

TEST_CASE("messages name source files from the repository's root, not the build machine's") {
  CHECK(detail::where("/home/ci/zrt/core/error.cpp", 7) == "core/error.cpp:7: ");
  CHECK(detail::where("/work/main/tests/runtime/engine_test.cpp", 3) == "tests/runtime/engine_test.cpp:3: ");
  CHECK(detail::where("/w/tools/trainer/model/layers.cpp", 1) == "tools/trainer/model/layers.cpp:1: ");
  CHECK(detail::where("runtime/engine.cpp", 2) == "runtime/engine.cpp:2: ");
  try {
    ZRT_ENFORCE(false, "here");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).rfind("tests/core/error_test.cpp:", 0) == 0);
  }
}

TEST_CASE("withoutRankPrefix drops one leading \"[rank R] \" and nothing else") {
  CHECK(withoutRankPrefix("[rank 12] core/x.cpp:3: bad") == "core/x.cpp:3: bad");
  CHECK(withoutRankPrefix("core/x.cpp:3: bad") == "core/x.cpp:3: bad");
  CHECK(withoutRankPrefix("[rank 1] [rank 1] x") == "[rank 1] x");
  CHECK(withoutRankPrefix("[rank 1]x") == "[rank 1]x");
}
