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
