// Element arithmetic (core/element_arithmetic.h) against a float64 reference: fp32
// accumulation, one rounding, the vector path equal to the scalar path bit for bit (lengths
// around the vector width), and exact averaging. It stays with the comm tests, whose buffer
// helpers it uses.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/element_arithmetic.h"
#include "tests/comm/comm_test_util.h"

using namespace zrt;
using test::Buf;

TEST_CASE("sumInto equals the float64 sum rounded once (fp32 accumulation)") {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int nsrc : {1, 2, 3, 5}) {
      for (std::size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 33u, 1000u}) {
        CAPTURE(nameOf(t));
        CAPTURE(nsrc);
        CAPTURE(n);
        std::vector<Buf> srcs;
        std::vector<const void*> ptrs;
        for (int k = 0; k < nsrc; ++k) {
          srcs.emplace_back(t, n);
          for (std::size_t i = 0; i < n; ++i) srcs.back().set(i, test::randomValue(k, i, t));
        }
        for (auto& s : srcs) ptrs.push_back(s.data());
        Buf out(t, n);
        sumInto(t, out.data(), ptrs.data(), nsrc, n);
        int bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          // fp32 accumulation in source order, then one rounding to the type.
          float acc = srcs[0].get(i);
          for (int k = 1; k < nsrc; ++k) acc += srcs[static_cast<std::size_t>(k)].get(i);
          Buf r(t, 1);
          r.set(0, acc);
          if (out.get(i) != r.get(0)) ++bad;
          double exact = 0, abs = 0;
          for (int k = 0; k < nsrc; ++k) {
            exact += srcs[static_cast<std::size_t>(k)].get(i);
            abs += std::fabs(srcs[static_cast<std::size_t>(k)].get(i));
          }
          // One rounding to the type plus fp32 accumulation.
          const double tol = test::unitRoundoff(t) * std::fabs(exact) + nsrc * std::ldexp(1.0, -24) * abs + 1e-30;
          if (std::fabs(out.get(i) - exact) > tol) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("sumInto may write into one of its sources") {
  Buf a(DType::BF16, 37, 1.5f), b(DType::BF16, 37, 2.25f);
  const void* srcs[2] = {a.data(), b.data()};
  sumInto(DType::BF16, b.data(), srcs, 2, 37);
  for (std::size_t i = 0; i < 37; ++i) CHECK(b.get(i) == 3.75f);
}

TEST_CASE("special values: infinity, NaN and overflow, the same on the vector and scalar paths") {
  // 24 elements: the first 16 take the vector path, the rest the scalar tail.
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    CAPTURE(nameOf(t));
    Buf a(t, 24), b(t, 24), out(t, 24);
    for (std::size_t i = 0; i < 24; ++i) {
      a.set(i, i % 3 == 0 ? inf : i % 3 == 1 ? std::nanf("") : 60000.f);
      b.set(i, i % 3 == 2 ? 60000.f : 1.f);
    }
    const void* srcs[2] = {a.data(), b.data()};
    sumInto(t, out.data(), srcs, 2, 24);
    for (std::size_t i = 0; i < 24; ++i) {
      CAPTURE(i);
      if (i % 3 == 0) CHECK(out.get(i) == inf);
      if (i % 3 == 1) CHECK(std::isnan(out.get(i)));
      if (i % 3 == 2) {
        if (t == DType::F16) CHECK(out.get(i) == inf);  // 120000 is past fp16's 65504
        else CHECK(std::fabs(out.get(i) - 120000.f) <= 120000.f * 0x1p-8f);
      }
    }
  }
}

TEST_CASE("sumPair is the MPI op body: inout = in + inout") {
  Buf in(DType::F16, 19, 0.5f), io(DType::F16, 19, 0.25f);
  sumPair(DType::F16, in.data(), io.data(), 19);
  for (std::size_t i = 0; i < 19; ++i) CHECK(io.get(i) == 0.75f);
}

TEST_CASE("averaging divides once by the exact divisor") {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int world : {1, 2, 3, 4, 6, 7, 8}) {
      CAPTURE(nameOf(t));
      CAPTURE(world);
      const std::size_t n = 41;
      Buf g(t, n), sum(t, n);
      std::vector<const void*> srcs(static_cast<std::size_t>(world));
      for (std::size_t i = 0; i < n; ++i) g.set(i, test::randomValue(9, i, t));
      for (auto& s : srcs) s = g.data();
      sumInto(t, sum.data(), srcs.data(), world, n);
      divideBy(t, sum.data(), n, static_cast<float>(world));
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        // The mean of equal fp16/bf16 values: their fp32 sum is exact, so with a power-of-two
        // world the mean is exact; otherwise (and in fp32, whose running sum rounds) it is
        // within the sum's and the quotient's roundings.
        const double d = std::fabs(static_cast<double>(sum.get(i)) - g.get(i));
        const bool exact = t != DType::F32 && (world & (world - 1)) == 0;
        if (exact ? d != 0 : d > (world + 1) * test::unitRoundoff(t) * std::fabs(g.get(i))) ++bad;
        // And it is the rounded quotient of the rounded sum, not a product with 1/world.
        Buf s1(t, 1), q(t, 1);
        float acc = 0;
        for (int k = 0; k < world; ++k) acc += g.get(i);
        s1.set(0, acc);
        q.set(0, s1.get(0) / static_cast<float>(world));
        if (q.get(0) != sum.get(i)) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("addDivided accumulates a scaled contribution") {
  Buf acc(DType::F32, 10, 1.f), add(DType::F32, 10, 6.f);
  addDivided(DType::F32, acc.data(), add.data(), 10, 3.f);
  for (std::size_t i = 0; i < 10; ++i) CHECK(acc.get(i) == 3.f);
}
