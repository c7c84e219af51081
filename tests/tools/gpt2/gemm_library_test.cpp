// ZRT_GPT2_GEMM: which library the model's products go through. Both compute the same product
// (within rounding), and a value that names neither is refused with a message naming the variable.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/trainer/model/gpt2_kernels.h"

namespace k = zrt::trainer::kernels;

TEST_CASE("ZRT_GPT2_GEMM names oneDNN or OpenBLAS; unset or empty is oneDNN") {
  CHECK(k::parseGemmLibrary(nullptr) == k::GemmLibrary::OneDnn);
  CHECK(k::parseGemmLibrary("") == k::GemmLibrary::OneDnn);
  CHECK(k::parseGemmLibrary("onednn") == k::GemmLibrary::OneDnn);
  CHECK(k::parseGemmLibrary("openblas") == k::GemmLibrary::OpenBlas);
  for (const char* bad : {"OpenBLAS", "mkl", "blas", " openblas"}) {
    CAPTURE(bad);
    try {
      k::parseGemmLibrary(bad);
      FAIL("accepted");
    } catch (const zrt::InvalidArgument& e) {
      const std::string what = e.what();
      CHECK(what.find("ZRT_GPT2_GEMM=") != std::string::npos);
      CHECK(what.find("use onednn (the default) or openblas") != std::string::npos);
    }
  }
  CHECK(std::string(k::gemmLibraryName(k::GemmLibrary::OneDnn)) == "oneDNN's dnnl_sgemm");
  CHECK(std::string(k::gemmLibraryName(k::GemmLibrary::OpenBlas)) == "OpenBLAS's cblas_sgemm");
}

TEST_CASE("both libraries compute the product, every transpose, alpha and beta") {
  k::initThreads();
  const int M = 37, N = 29, K = 53;  // not multiples of any kernel's block
  std::vector<float> A(M * K), B(K * N), C0(M * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.23f * static_cast<float>(i));
  for (std::size_t i = 0; i < C0.size(); ++i) C0[i] = 0.01f * static_cast<float>(i % 17);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // op(A) is M x K and op(B) K x N: a transposed operand is stored the other way round.
      const int lda = ta ? M : K, ldb = tb ? K : N;
      auto a = [&](int i, int p) { return ta ? A[p * lda + i] : A[i * lda + p]; };
      auto b = [&](int p, int j) { return tb ? B[j * ldb + p] : B[p * ldb + j]; };
      for (auto library : {k::GemmLibrary::OneDnn, k::GemmLibrary::OpenBlas}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(k::gemmLibraryName(library));
        std::vector<float> C = C0;
        k::sgemmOn(library, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C.data(), N);
        double worst = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double want = 2.0 * C0[i * N + j];
            for (int p = 0; p < K; ++p) want += 0.5 * double(a(i, p)) * double(b(p, j));
            worst = std::max(worst, std::abs(double(C[i * N + j]) - want));
          }
        CHECK(worst < 1e-4);
      }
    }
}
