#include "tools/trainer/model/gpt2_kernels.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"

namespace zrt::trainer::kernels {

namespace {

constexpr float kLayerNormEps = 1e-5f;

// Row r of a row-major array with `cols` columns, indexed in 64 bits: batch x T x 4C overflows
// int at sizes a user may ask for.
inline float* row(float* base, std::int64_t r, std::int64_t cols) { return base + r * cols; }
inline const float* row(const float* base, std::int64_t r, std::int64_t cols) {
  return base + r * cols;
}

// exp written as plain arithmetic, so the loops around it vectorise: libm's expf (and tanhf,
// once the largest cost after the matrix products) are scalar calls per element.
// exp: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (truncation below
// 1.3e-7 relative), times 2^n built in the exponent bits. The rounding of x log2(e) to n adds
// and subtracts 1.5 x 2^23, which works in the default rounding mode without SSE4.1's round.
// Within 3 ulp of exp over [-87, 88] (checked against double exp on a dense sweep), far below
// what the PyTorch comparison (1e-5 of the logits' scale) can see. Callers keep inputs in that
// range: below it, the softmax's clamp gives 1.6e-38 rather than a denormal or 0, harmless there.
// Clamps are ternaries on values: std::min/max return references, which GCC does not turn into
// vector min/max, and the loop then does not vectorise.
[[gnu::always_inline]] inline float clamp(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

// For x in [-87, 88] (or NaN). The range is left to the caller: GELU bounds its argument anyway,
// and a second clamp on a clamped value is not folded away; the two compiled to chains of
// compares and blends that made GELU's forward 2.4x slower.
[[gnu::always_inline]] inline float expInRange(float x) {
  // 1.5 x 2^23 + n: its low mantissa bits hold n, read below as an integer without a float to
  // int conversion (undefined for the NaN that must pass through to flag an fp16 overflow).
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::uint32_t biased =
      std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(12582912.0f) + 127u;
  return p * std::bit_cast<float>(biased << 23);
}

// For x <= 0 (or NaN), as in a softmax after subtracting the row's maximum.
[[gnu::always_inline]] inline float expNonPositive(float x) {
  return expInRange(x < -87.0f ? -87.0f : x);
}

// The element-wise passes gain from wider vectors than x86-64's baseline SSE2: one clone per
// ISA of each loop below, picked once at load time, so a process always computes the same bits.
// (Clones named by "arch=" instead of an ISA do not vectorise under GCC 12: the always-inline
// helpers above then compile for the default target.)
#define ZRT_GPT2_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// One product, on the calling thread, through oneDNN's sgemm: on the model's products (K of 256
// to 1024, each thread's share of 1024 rows) its JIT kernels made a 4 x 256 training step about
// 8% faster than OpenBLAS 0.3.21's SkylakeX kernels (alternating runs, docs/results.md).
void sgemmOneDnn(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  dnnl_status_t st = dnnl_success;
  // oneDNN keeps a call made inside an active region on its thread, as it does with one thread.
  if (omp_in_parallel() || omp_get_max_threads() == 1) {
    st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    // Outside one it would start threads of its own: a thread count set inside a region applies
    // to that region only, so this keeps the call on this thread and leaves the caller's be.
#pragma omp parallel num_threads(1)
    {
      omp_set_num_threads(1);
      st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  }
  // oneDNN rejects only bad sizes, so this is a bug; inside a team's region the throw ends the
  // process with this message.
  if (st != dnnl_success)
    ZRT_THROW(ExternalError, "gpt2: dnnl_sgemm(", ta, tb, ", M ", M, ", N ", N, ", K ", K, ", lda ",
              lda, ", ldb ", ldb, ", ldc ", ldc, ") failed with dnnl_status_t ", static_cast<int>(st));
}

}  // namespace

GemmLibrary parseGemmLibrary(const char* value) {
  if (value == nullptr || *value == '\0') return GemmLibrary::OneDnn;
  const std::string v = value;
  if (v == "onednn") return GemmLibrary::OneDnn;
  if (v == "openblas") return GemmLibrary::OpenBlas;
  ZRT_THROW(InvalidArgument, "gpt2: ", kGemmLibraryVariable, "=", v,
            " is not a GEMM library: use onednn (the default) or openblas");
}

GemmLibrary gemmLibrary() {
  static const GemmLibrary library = parseGemmLibrary(std::getenv(kGemmLibraryVariable));
  return library;
}

const char* gemmLibraryName(GemmLibrary library) {
  return library == GemmLibrary::OpenBlas ? "OpenBLAS's cblas_sgemm" : "oneDNN's dnnl_sgemm";
}

void sgemmOn(GemmLibrary library, bool transA, bool transB, int M, int N, int K, float alpha,
             const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (library == GemmLibrary::OpenBlas) {
    // initThreads() set OpenBLAS to one thread, so the call stays on the calling thread.
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  sgemmOneDnn(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  sgemmOn(gemmLibrary(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

Span threadShare(int count, int granule) {
  // Outside an active region: one thread, number 0.
  const int threads = omp_get_num_threads(), t = omp_get_thread_num();
  const std::int64_t granules = (count + granule - 1) / granule;
  const auto edge = [&](int i) {
    return static_cast<int>(std::min<std::int64_t>(count, granules * i / threads * granule));
  };
  return {edge(t), edge(t + 1)};
}

void initThreads() {
  openblas_set_num_threads(1);
  gemmLibrary();
}

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  // A weight gradient (M = inputs, N = outputs, K = tokens) split by rows would have every
  // thread pack all of dy; split along N, each packs all of x^T, the smaller.
  if (M >= N) {
    const Span s = threadShare(M, kRowGranule);
    const float* a = transA ? A + s.begin : row(A, s.begin, lda);
    sgemm(transA, transB, s.size(), N, K, alpha, a, lda, B, ldb, beta, row(C, s.begin, ldc), ldc);
  } else {
    const Span s = threadShare(N, kRowGranule);
    const float* b = transB ? row(B, s.begin, ldb) : B + s.begin;
    sgemm(transA, transB, M, s.size(), K, alpha, A, lda, b, ldb, beta, C + s.begin, ldc);
  }
}

void columnSums(float* out, const float* x, const float* ones, int n, int cols) {
  const Span s = threadShare(cols, kRowGranule);
  if (s.size() > 0)
    cblas_sgemv(CblasRowMajor, CblasTrans, n, s.size(), 1.0f, x + s.begin, cols, ones, 1, 0.0f,
                out + s.begin, 1);
}

namespace {

// y = (residual ? residual : 0) + b over `rows` rows: the product then accumulates onto it
// (beta = 1), one pass over y instead of a product pass and a bias pass.
ZRT_GPT2_SIMD_CLONES void fillBias(float* y, const float* b, const float* residual, int rows,
                                   int out) {
  for (int i = 0; i < rows; ++i) {
    float* yr = row(y, i, out);
    if (residual) {
      const float* rr = row(residual, i, out);
#pragma omp simd
      for (int j = 0; j < out; ++j) yr[j] = rr[j] + b[j];
    } else {
#pragma omp simd
      for (int j = 0; j < out; ++j) yr[j] = b[j];
    }
  }
}

}  // namespace

void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual,
                   Span s, int in, int out) {
  if (s.size() <= 0) return;
  float* ys = row(y, s.begin, out);
  fillBias(ys, b, residual ? row(residual, s.begin, out) : nullptr, s.size(), out);
  sgemm(false, false, s.size(), out, in, 1.0f, row(x, s.begin, in), in, W, out, 1.0f, ys, out);
}

void linearInputGrad(float* dx, const float* dy, const float* W, Span s, int in, int out,
                     bool accumulate) {
  sgemm(false, true, s.size(), in, out, 1.0f, row(dy, s.begin, out), out, W, out,
        accumulate ? 1.0f : 0.0f, row(dx, s.begin, in), in);
}

void linearParamGrads(float* dW, float* db, const float* dy, const float* x, const float* ones,
                      int n, int in, int out) {
  if (dW) gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 0.0f, dW, out);
  if (db) columnSums(db, dy, ones, n, out);
}

namespace {

ZRT_GPT2_SIMD_CLONES void layerNormRows(float* out, float* mean, float* rstd, const float* x,
                                        const float* w, const float* b, int rows, int c) {
  for (int i = 0; i < rows; ++i) {
    const float* xr = row(x, i, c);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < c; ++j) sum += xr[j];
    const float m = sum / static_cast<float>(c);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int j = 0; j < c; ++j) {
      const float d = xr[j] - m;
      var += d * d;
    }
    const float s = 1.0f / std::sqrt(var / static_cast<float>(c) + kLayerNormEps);
    float* o = row(out, i, c);
#pragma omp simd
    for (int j = 0; j < c; ++j) o[j] = (xr[j] - m) * s * w[j] + b[j];
    mean[i] = m;
    rstd[i] = s;
  }
}

// Per row: dx += rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w; tmp = dy xhat, whose
// column sums (a BLAS gemv, not a reduction across threads whose order would vary) are the
// weight's gradient.
ZRT_GPT2_SIMD_CLONES void layerNormBackRows(float* dx, float* tmp, const float* dy,
                                            const float* x, const float* w, const float* mean,
                                            const float* rstd, int rows, int c) {
  for (int i = 0; i < rows; ++i) {
    const float* xr = row(x, i, c);
    const float* g = row(dy, i, c);
    float* t = row(tmp, i, c);
    const float m = mean[i], s = rstd[i];
    float sumG = 0.0f, sumGx = 0.0f;
#pragma omp simd reduction(+ : sumG, sumGx)
    for (int j = 0; j < c; ++j) {
      const float xhat = (xr[j] - m) * s;
      const float gw = g[j] * w[j];
      sumG += gw;
      sumGx += gw * xhat;
      t[j] = g[j] * xhat;
    }
    const float meanG = sumG / static_cast<float>(c), meanGx = sumGx / static_cast<float>(c);
    float* d = row(dx, i, c);
#pragma omp simd
    for (int j = 0; j < c; ++j) {
      const float xhat = (xr[j] - m) * s;
      d[j] += s * (g[j] * w[j] - meanG - xhat * meanGx);
    }
  }
}

}  // namespace

void layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, Span s, int c) {
  if (s.size() > 0)
    layerNormRows(row(out, s.begin, c), mean + s.begin, rstd + s.begin, row(x, s.begin, c), w, b,
                  s.size(), c);
}

void layerNormBackward(float* dx, float* tmp, const float* dy, const float* x, const float* w,
                       const float* mean, const float* rstd, Span s, int c) {
  if (s.size() > 0)
    layerNormBackRows(row(dx, s.begin, c), row(tmp, s.begin, c), row(dy, s.begin, c),
                      row(x, s.begin, c), w, mean + s.begin, rstd + s.begin, s.size(), c);
}

void layerNormParamGrads(float* dw, float* db, const float* dy, const float* tmp,
                         const float* ones, int n, int c) {
  if (dw) columnSums(dw, tmp, ones, n, c);
  if (db) columnSums(db, dy, ones, n, c);
}

namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
// |2u| is clamped here: e^{+-80} and 1 / (1 + e^80) are normal floats (no slow denormals), and
// the sigmoid is within 2e-35 of 0 or 1 beyond it.
constexpr float kGeluMaxZ = 80.0f;

// GELU's tanh form 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), is x s with
// s = sigmoid(2u) = 1 / (1 + e^{-2u}): one exp and one division, and no cancellation in 1 + tanh
// for negative x. Its slope, s + 2 x s (1 - s) u' with u' = sqrt(2/pi) (1 + 3 0.044715 x^2) and
// 1 - s = e^{-2u} s (exact where s rounds to 1), costs a few multiplies more here, and replaces
// the input, which backward needs only for it: backward is then one multiply per element.
ZRT_GPT2_SIMD_CLONES void geluForwardChunk(float* out, float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    const float z = clamp(2.0f * kGeluK * (x + kGeluA * x * x * x), -kGeluMaxZ, kGeluMaxZ);
    const float e = expInRange(-z);  // |z| <= kGeluMaxZ
    const float s = 1.0f / (1.0f + e);
    out[i] = x * s;
    in[i] = s + 2.0f * x * s * (e * s) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  }
}

ZRT_GPT2_SIMD_CLONES void geluBackwardChunk(float* d, const float* slope, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) d[i] *= slope[i];
}

}  // namespace

void geluForward(float* out, float* in, Span s, int cols) {
  const std::int64_t first = static_cast<std::int64_t>(s.begin) * cols;
  if (s.size() > 0)
    geluForwardChunk(out + first, in + first, static_cast<std::int64_t>(s.size()) * cols);
}

void geluBackward(float* d, const float* slope, Span s, int cols) {
  const std::int64_t first = static_cast<std::int64_t>(s.begin) * cols;
  if (s.size() > 0)
    geluBackwardChunk(d + first, slope + first, static_cast<std::int64_t>(s.size()) * cols);
}

namespace {

// Causal attention works on blocks of this many rows (and columns): a block of rows [i0, i1)
// of the scores needs keys [0, i1) only, so products skip the blocks above the diagonal. Smaller
// blocks skip more but make thinner products. Measured, one thread, forward and backward of a
// batch of 8: against 16, 64, 128 (no skipping) rows, 32 was fastest at T 128 (3.0 ms against
// 3.1, 3.5, 4.7) and at T 256 (18.5 against 19.3, 20.2, 23.5).
constexpr int kAttentionBlock = 32;

// The row loops below work on whole groups of kLanes columns (an AVX-512 register; two AVX2 or
// four SSE ones in the other clones) with the causal mask as a select, and the partial maxima
// and sums in kLanes accumulators: GCC then emits whole-vector loops, where a loop over j <= i
// gets a vector part and a scalar tail for every row (which cost more than the vector part).
constexpr int kLanes = 16;

// Rows [i0, i1) of one head's scores (row i at s + (i - i0) * ld), which hold columns [0, i1):
// softmax over columns [0, i] of row i; columns (i, i1) become 0 for the products that read the
// whole block.
ZRT_GPT2_SIMD_CLONES void causalSoftmaxRows(float* s, std::int64_t ld, int i0, int i1) {
  const int whole = i1 / kLanes * kLanes;
  for (int i = i0; i < i1; ++i) {
    float* r = s + (i - i0) * ld;
    float lane[kLanes];
    for (int k = 0; k < kLanes; ++k) lane[k] = r[0];
    for (int j0 = 0; j0 < whole; j0 += kLanes) {
#pragma omp simd
      for (int k = 0; k < kLanes; ++k) {
        const float v = j0 + k <= i ? r[j0 + k] : r[0];
        lane[k] = v > lane[k] ? v : lane[k];
      }
    }
    float mx = r[0];
    for (int k = 0; k < kLanes; ++k) mx = lane[k] > mx ? lane[k] : mx;
    for (int j = whole; j <= i; ++j) mx = r[j] > mx ? r[j] : mx;
    for (int k = 0; k < kLanes; ++k) lane[k] = 0.0f;
    for (int j0 = 0; j0 < whole; j0 += kLanes) {
#pragma omp simd
      for (int k = 0; k < kLanes; ++k) {
        const float e = j0 + k <= i ? expNonPositive(r[j0 + k] - mx) : 0.0f;
        r[j0 + k] = e;
        lane[k] += e;
      }
    }
    float sum = 0.0f;
    for (int k = 0; k < kLanes; ++k) sum += lane[k];
    for (int j = whole; j < i1; ++j) {
      const float e = j <= i ? expNonPositive(r[j] - mx) : 0.0f;
      r[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < i1; ++j) r[j] *= inv;
  }
}

// The same rows of dP (in d) become dS = P (dP - sum_j P dP), 0 above the diagonal (where P is
// already 0).
ZRT_GPT2_SIMD_CLONES void causalSoftmaxBackRows(float* d, const float* p, std::int64_t ld, int i0,
                                                int i1) {
  const int whole = i1 / kLanes * kLanes;
  for (int i = i0; i < i1; ++i) {
    const float* pr = p + (i - i0) * ld;
    float* dr = d + (i - i0) * ld;
    float lane[kLanes] = {};
    for (int j0 = 0; j0 < whole; j0 += kLanes) {
#pragma omp simd
      for (int k = 0; k < kLanes; ++k)
        lane[k] += j0 + k <= i ? pr[j0 + k] * dr[j0 + k] : 0.0f;
    }
    float dot = 0.0f;
    for (int k = 0; k < kLanes; ++k) dot += lane[k];
    for (int j = whole; j <= i; ++j) dot += pr[j] * dr[j];
#pragma omp simd
    for (int j = 0; j < i1; ++j) dr[j] = j <= i ? pr[j] * (dr[j] - dot) : 0.0f;
  }
}

// dst[j, t] = src[t, j] for t < T, j < D (src rows `ld` apart, dst rows T apart), in 16 x 16
// tiles so both sides stay in cache lines.
ZRT_GPT2_SIMD_CLONES void transposeInto(float* dst, const float* src, std::int64_t ld, int T,
                                        int D) {
  constexpr int kTile = 16;
  for (int t0 = 0; t0 < T; t0 += kTile)
    for (int j0 = 0; j0 < D; j0 += kTile) {
      const int t1 = std::min(T, t0 + kTile), j1 = std::min(D, j0 + kTile);
      for (int j = j0; j < j1; ++j)
        for (int t = t0; t < t1; ++t) dst[static_cast<std::int64_t>(j) * T + t] = src[t * ld + j];
    }
}

// One head's K or V transposed, [D, T], per thread: a product with it is NN, for which
// OpenBLAS's small-matrix kernels ran about twice as fast as the NT ones with K or V in place
// (measured 76 against 157 GFLOP/s for a 32 x 128 x 64 block; not measured again on oneDNN).
// Grows on first use.
float* transposeScratch(std::size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

}  // namespace

void attentionForward(float* out, float* att, const float* qkv, Span pairs, int T, int C,
                      int heads) {
  const int D = C / heads, ld = 3 * C, R = kAttentionBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
  for (int bh = pairs.begin; bh < pairs.end; ++bh) {
    const int b = bh / heads, h = bh % heads;
    const float* base = row(qkv, static_cast<std::int64_t>(b) * T, ld);
    const float *q = base + h * D, *k = base + C + h * D, *v = base + 2 * C + h * D;
    float* p = att + bh * tt;
    float* o = row(out, static_cast<std::int64_t>(b) * T, C) + h * D;
    float* kt = transposeScratch(static_cast<std::size_t>(D) * T);
    transposeInto(kt, k, ld, T, D);
    for (int i0 = 0; i0 < T; i0 += R) {
      const int i1 = std::min(T, i0 + R);
      float* pb = row(p, i0, T);
      sgemm(false, false, i1 - i0, i1, D, scale, row(q, i0, ld), ld, kt, T, 0.0f, pb, T);
      causalSoftmaxRows(pb, T, i0, i1);
      sgemm(false, false, i1 - i0, D, i1, 1.0f, pb, T, v, ld, 0.0f, row(o, i0, C), C);
    }
  }
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, Span pairs, int T, int C, int heads) {
  const int D = C / heads, ld = 3 * C, R = kAttentionBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
  for (int bh = pairs.begin; bh < pairs.end; ++bh) {
    const int b = bh / heads, h = bh % heads;
    const float* base = row(qkv, static_cast<std::int64_t>(b) * T, ld);
    const float *q = base + h * D, *k = base + C + h * D, *v = base + 2 * C + h * D;
    float* dbase = row(dqkv, static_cast<std::int64_t>(b) * T, ld);
    float *dq = dbase + h * D, *dk = dbase + C + h * D, *dv = dbase + 2 * C + h * D;
    const float* dob = row(dout, static_cast<std::int64_t>(b) * T, C) + h * D;
    const float* p = att + bh * tt;
    float* d = datt + bh * tt;
    float* vt = transposeScratch(static_cast<std::size_t>(D) * T);
    transposeInto(vt, v, ld, T, D);
    // By blocks of rows: out = P V gives dP = dout V^T; through the softmax, dS; and
    // S = scale Q K^T gives dQ = scale dS K.
    for (int i0 = 0; i0 < T; i0 += R) {
      const int i1 = std::min(T, i0 + R);
      float* db = row(d, i0, T);
      sgemm(false, false, i1 - i0, i1, D, 1.0f, row(dob, i0, C), C, vt, T, 0.0f, db, T);
      causalSoftmaxBackRows(db, row(p, i0, T), T, i0, i1);
      sgemm(false, false, i1 - i0, D, i1, scale, db, T, k, ld, 0.0f, row(dq, i0, ld), ld);
    }
    // By blocks of columns j0..j1, which rows i >= j0 reach: dV = P^T dout and dK = scale dS^T Q.
    for (int j0 = 0; j0 < T; j0 += R) {
      const int j1 = std::min(T, j0 + R);
      sgemm(true, false, j1 - j0, D, T - j0, 1.0f, row(p, j0, T) + j0, T, row(dob, j0, C), C,
            0.0f, row(dv, j0, ld), ld);
      sgemm(true, false, j1 - j0, D, T - j0, scale, row(d, j0, T) + j0, T, row(q, j0, ld), ld,
            0.0f, row(dk, j0, ld), ld);
    }
  }
}

namespace {

ZRT_GPT2_SIMD_CLONES void embeddingRows(float* x, const std::uint8_t* tokens, const float* wte,
                                        const float* wpe, std::int64_t first, int rows, int T,
                                        int C) {
  for (int r = 0; r < rows; ++r) {
    const std::int64_t i = first + r;
    const float* e = row(wte, tokens[i], C);
    const float* p = row(wpe, i % T, C);
    float* o = row(x, i, C);
#pragma omp simd
    for (int j = 0; j < C; ++j) o[j] = e[j] + p[j];
  }
}

// Columns [j0, j1) of both gradients, every row in sequence order.
ZRT_GPT2_SIMD_CLONES void embeddingBackColumns(float* dwte, float* dwpe, const float* dx,
                                               const std::uint8_t* tokens, int batch, int T,
                                               int C, int j0, int j1) {
  if (dwpe)
    for (int t = 0; t < T; ++t) {
      float* p = row(dwpe, t, C);
#pragma omp simd
      for (int j = j0; j < j1; ++j) p[j] = 0.0f;
    }
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < T; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * T + t;
      const float* g = row(dx, i, C);
      if (dwte) {
        float* e = row(dwte, tokens[i], C);
#pragma omp simd
        for (int j = j0; j < j1; ++j) e[j] += g[j];
      }
      if (dwpe) {
        float* p = row(dwpe, t, C);
#pragma omp simd
        for (int j = j0; j < j1; ++j) p[j] += g[j];
      }
    }
  }
}

}  // namespace

void embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                      Span s, int T, int C) {
  if (s.size() > 0) embeddingRows(x, tokens, wte, wpe, s.begin, s.size(), T, C);
}

void embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                       int batch, int T, int C) {
  if (!dwte && !dwpe) return;
  // Threads split the columns, so rows that share a token add in sequence order on one thread:
  // no races and the same sum every run.
  const Span s = threadShare(C, kRowGranule);
  if (s.size() > 0) embeddingBackColumns(dwte, dwpe, dx, tokens, batch, T, C, s.begin, s.end);
}

void loraForward(float* y, float* u, const float* x, const float* A, const float* B, float scale,
                 Span s, int in, int out, int r) {
  float* us = row(u, s.begin, r);
  sgemm(false, true, s.size(), r, in, 1.0f, row(x, s.begin, in), in, A, in, 0.0f, us, r);
  // beta 1 adds onto the base layer's output; with B = 0 every product is zero and y keeps its
  // exact value, so fresh adapters leave the model's outputs bit for bit.
  if (y) sgemm(false, true, s.size(), out, r, scale, us, r, B, r, 1.0f, row(y, s.begin, out), out);
}

void loraDu(float* du, const float* dy, const float* B, float scale, Span s, int out, int r) {
  sgemm(false, false, s.size(), r, out, scale, row(dy, s.begin, out), out, B, r, 0.0f,
        row(du, s.begin, r), r);
}

void loraParamGrads(float* dA, float* dB, const float* dy, const float* x, const float* u,
                    const float* du, float scale, int n, int in, int out, int r) {
  if (dB) gemm(true, false, out, r, n, scale, dy, out, u, r, 0.0f, dB, r);
  if (dA) gemm(true, false, r, in, n, 1.0f, du, r, x, in, 0.0f, dA, in);
}

void loraInputGrad(float* dx, const float* du, const float* A, Span s, int in, int r) {
  sgemm(false, false, s.size(), in, r, 1.0f, row(du, s.begin, r), r, A, in, 1.0f,
        row(dx, s.begin, in), in);
}

namespace {

ZRT_GPT2_SIMD_CLONES void crossEntropyRows(float* logits, float* rowLoss,
                                           const std::uint8_t* targets, int rows, int V) {
  for (int i = 0; i < rows; ++i) {
    float* l = row(logits, i, V);
    float mx = l[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < V; ++j) mx = l[j] > mx ? l[j] : mx;
    // -log p[target] from the shifted logit, not the log of the probability, which underflows
    // for confident wrong predictions.
    const float target = l[targets[i]] - mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) {
      l[j] = expNonPositive(l[j] - mx);
      sum += l[j];
    }
    rowLoss[i] = std::log(sum) - target;
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) l[j] *= inv;
  }
}

}  // namespace

void crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, Span s,
                         int V) {
  if (s.size() > 0)
    crossEntropyRows(row(logits, s.begin, V), rowLoss + s.begin, targets + s.begin, s.size(), V);
}

double meanLoss(const float* rowLoss, int n) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += rowLoss[i];
  return total / n;
}

void crossEntropyBackward(float* probs, const std::uint8_t* targets, Span s, int n, int V,
                          double scale) {
  const float f = static_cast<float>(scale / n);
  for (int i = s.begin; i < s.end; ++i) {
    float* p = row(probs, i, V);
    p[targets[i]] -= 1.0f;
    for (int j = 0; j < V; ++j) p[j] *= f;
  }
}

}  // namespace zrt::trainer::kernels
