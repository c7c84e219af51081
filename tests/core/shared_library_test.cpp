// SharedLibrary against a library every Linux machine has (libm), and the messages for a library
// and a symbol that do not exist: they must name what was missing and say how to provide it.
#include "core/shared_library.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "core/error.h"

using namespace zrt;

TEST_CASE("a symbol of a real library is found and can be called") {
  SharedLibrary libm = SharedLibrary::open("libm.so.6");
  CHECK(libm);
  CHECK(libm.soname() == "libm.so.6");
  auto cosine = libm.symbol<double (*)(double)>("cos");
  REQUIRE(static_cast<bool>(cosine));  // doctest prints no function pointer
  CHECK(cosine(0.0) == doctest::Approx(1.0));
  CHECK(cosine(3.141592653589793) == doctest::Approx(-1.0));

  // The handle moves with its owner; the one moved from is empty.
  SharedLibrary moved = std::move(libm);
  CHECK(moved);
  CHECK_FALSE(libm);
  CHECK(moved.symbol<double (*)(double)>("cos")(0.0) == doctest::Approx(1.0));
}

TEST_CASE("a missing library is an ExternalError naming it and saying how to provide it") {
  try {
    SharedLibrary::open("libzrt_no_such_library.so.1", "it comes with the zrt-test package");
    FAIL("no throw");
  } catch (const ExternalError& e) {
    const std::string w = e.what();
    CHECK(w.find("libzrt_no_such_library.so.1") != std::string::npos);
    CHECK(w.find("LD_LIBRARY_PATH") != std::string::npos);
    CHECK(w.find("it comes with the zrt-test package") != std::string::npos);
    // dlerror()'s own text is quoted.
    CHECK(w.find("cannot open shared object file") != std::string::npos);
  }
}

TEST_CASE("a missing symbol is an ExternalError naming the symbol and the library") {
  SharedLibrary libm = SharedLibrary::open("libm.so.6");
  try {
    libm.address("zrt_no_such_symbol");
    FAIL("no throw");
  } catch (const ExternalError& e) {
    const std::string w = e.what();
    CHECK(w.find("zrt_no_such_symbol") != std::string::npos);
    CHECK(w.find("libm.so.6") != std::string::npos);
    CHECK(w.find("undefined symbol") != std::string::npos);  // dlerror()'s text
  }
}

TEST_CASE("an empty SharedLibrary refuses lookups") {
  SharedLibrary none;
  CHECK_FALSE(none);
  CHECK_THROWS_AS(none.address("cos"), Error);
}
