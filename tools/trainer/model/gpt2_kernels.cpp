#include "tools/trainer/model/gpt2_kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <string>

namespace zrt::trainer::kernels {

namespace {

constexpr float kLayerNormEps = 1e-5f;
// Threads split products into blocks of whole multiples of this many rows (a BLAS kernel's
// register block), so no thread gets a sliver.
constexpr int kGemmRowBlock = 16;

// A product's multiply-adds per element of an element-wise pass, roughly, in time: products
// below kParallelMinElements x this stay on one thread.
constexpr std::int64_t kGemmWorkPerElement = 32;

// Each of `threads` takes this many of `count` rows: whole blocks, the last thread the rest.
int blockShare(int count, int threads) {
  const int blocks = (count + kGemmRowBlock - 1) / kGemmRowBlock;
  return (blocks + threads - 1) / threads * kGemmRowBlock;
}

// Row r of a row-major array with `cols` columns, indexed in 64 bits: batch x T x 4C overflows
// int at sizes a user may ask for.
inline float* row(float* base, std::int64_t r, std::int64_t cols) { return base + r * cols; }
inline const float* row(const float* base, std::int64_t r, std::int64_t cols) {
  return base + r * cols;
}

// exp and tanh written as plain arithmetic, so the loops around them vectorise: libm's tanhf and
// expf are scalar calls per element (tanhf was the largest cost after the matrix products).
// exp: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (truncation below
// 1.3e-7 relative), times 2^n built in the exponent bits. The rounding of x log2(e) to n adds
// and subtracts 1.5 x 2^23, which works in the default rounding mode without SSE4.1's round.
// Within 3 ulp of exp over [-87, 88] (checked against double exp on a dense sweep), far below
// what the PyTorch comparison (1e-5 of the logits' scale) can see. Inputs are clamped to that
// range: below it the result is 1.6e-38 rather than a denormal or 0, harmless in a softmax.
// Clamps are ternaries on values: std::min/max return references, which GCC does not turn into
// vector min/max, and the loop then does not vectorise.
[[gnu::always_inline]] inline float clamp(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

[[gnu::always_inline]] inline float expApprox(float x) {
  x = clamp(x, -87.0f, 88.0f);
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

// tanh(u) = 1 - 2 / (e^{2u} + 1): no cancellation near 1 (where GELU needs it), and an absolute
// error of a few 1e-8 near 0, where GELU's 0.5 x (1 + tanh) only needs it absolute. |u| > 9
// gives +-1 exactly in fp32 anyway; the clamp keeps e^{2u} finite.
[[gnu::always_inline]] inline float tanhApprox(float u) {
  u = clamp(u, -9.0f, 9.0f);
  return 1.0f - 2.0f / (expApprox(2.0f * u) + 1.0f);
}

}  // namespace

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  const auto call = [&](int m0, int rows) {
    // Row block [m0, m0 + rows) of C: rows of op(A), which are columns of A when transposed.
    const float* a = transA ? A + m0 : A + static_cast<std::int64_t>(m0) * lda;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, rows, N, K, alpha, a, lda, B, ldb, beta,
                C + static_cast<std::int64_t>(m0) * ldc, ldc);
  };
  if (omp_in_parallel() || M < 2 * kGemmRowBlock ||
      !worthThreads(static_cast<std::int64_t>(M) * N * K / kGemmWorkPerElement)) {
    call(0, M);
    return;
  }
  // BLAS runs one thread per call (initThreads); the threads here split C's rows into equal
  // blocks, so element-wise loops and products share one pool instead of two pools spinning
  // against each other. The split depends only on M and the thread count, so a product gives
  // the same bits every time it is repeated (checkpointing's recomputation relies on that).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int per = blockShare(M, nt);
    const int m0 = std::min(M, t * per), rows = std::min(M, m0 + per) - m0;
    if (rows > 0) call(m0, rows);
  }
}

void columnSums(float* out, const float* x, const float* ones, int n, int cols) {
  const auto call = [&](int j0, int count) {
    cblas_sgemv(CblasRowMajor, CblasTrans, n, count, 1.0f, x + j0, cols, ones, 1, 0.0f, out + j0,
                1);
  };
  if (omp_in_parallel() || cols < 2 * kGemmRowBlock ||
      !worthThreads(static_cast<std::int64_t>(n) * cols)) {
    call(0, cols);
    return;
  }
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int per = blockShare(cols, nt);
    const int j0 = std::min(cols, t * per), count = std::min(cols, j0 + per) - j0;
    if (count > 0) call(j0, count);
  }
}

void initThreads() { openblas_set_num_threads(1); }

std::string blasCoreName() { return openblas_get_corename(); }

void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual,
                   int n, int in, int out) {
  // The bias (and residual) go in first so the product accumulates onto them (beta = 1): one
  // pass over y instead of a product pass and a separate bias pass.
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(n) * out))
  for (int i = 0; i < n; ++i) {
    float* yr = row(y, i, out);
    if (residual) {
      const float* rr = row(residual, i, out);
      for (int j = 0; j < out; ++j) yr[j] = rr[j] + b[j];
    } else {
      for (int j = 0; j < out; ++j) yr[j] = b[j];
    }
  }
  gemm(false, false, n, out, in, 1.0f, x, in, W, out, 1.0f, y, out);
}

void linearBackward(const float* dy, const float* x, const float* W, float* dx, float* dW,
                    float* db, const float* ones, int n, int in, int out, bool accumulateDx) {
  if (dW) gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 0.0f, dW, out);
  if (db) columnSums(db, dy, ones, n, out);
  if (dx) gemm(false, true, n, in, out, 1.0f, dy, out, W, out, accumulateDx ? 1.0f : 0.0f, dx, in);
}

void layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, int n, int c) {
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(n) * c))
  for (int i = 0; i < n; ++i) {
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
    for (int j = 0; j < c; ++j) o[j] = (xr[j] - m) * s * w[j] + b[j];
    mean[i] = m;
    rstd[i] = s;
  }
}

void layerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, const float* mean, const float* rstd, float* tmp,
                       const float* ones, int n, int c) {
  // Per row: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w. The weight gradient's
  // terms dy xhat go to `tmp` so both column sums are BLAS gemv's rather than a reduction
  // across threads, whose order (and so whose bits) would vary from run to run.
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(n) * c))
  for (int i = 0; i < n; ++i) {
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
    for (int j = 0; j < c; ++j) {
      const float xhat = (xr[j] - m) * s;
      d[j] += s * (g[j] * w[j] - meanG - xhat * meanGx);
    }
  }
  if (dw) columnSums(dw, tmp, ones, n, c);
  if (db) columnSums(db, dy, ones, n, c);
}

void loraForward(float* y, float* u, const float* x, const float* A, const float* B, float scale,
                 int n, int in, int out, int r) {
  gemm(false, true, n, r, in, 1.0f, x, in, A, in, 0.0f, u, r);
  // beta 1 adds onto the base layer's output; with B = 0 every product is zero and y keeps its
  // exact value, so fresh adapters leave the model's outputs bit for bit.
  if (y) gemm(false, true, n, out, r, scale, u, r, B, r, 1.0f, y, out);
}

void loraBackward(const float* dy, const float* x, const float* u, const float* A, const float* B,
                  float scale, float* du, float* dx, float* dA, float* dB, int n, int in, int out,
                  int r) {
  gemm(false, false, n, r, out, scale, dy, out, B, r, 0.0f, du, r);
  if (dB) gemm(true, false, out, r, n, scale, dy, out, u, r, 0.0f, dB, r);
  if (dA) gemm(true, false, r, in, n, 1.0f, du, r, x, in, 0.0f, dA, in);
  gemm(false, false, n, in, r, 1.0f, du, r, A, in, 1.0f, dx, in);
}

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr std::int64_t kChunk = 4096;  // elements per OpenMP work item of the element-wise loops

// GELU is the one element-wise pass heavy enough to gain from wider vectors than x86-64's
// baseline SSE2: one clone per ISA, picked once at load time, so a process always computes the
// same bits. (Clones named by "arch=" instead of an ISA do not vectorise under GCC 12: the
// always-inline helpers above then compile for the default target.)
#define ZRT_GPT2_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

ZRT_GPT2_SIMD_CLONES void geluForwardChunk(float* out, const float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhApprox(kGeluK * (x + kGeluA * x * x * x)));
  }
}

ZRT_GPT2_SIMD_CLONES void geluBackwardChunk(float* d, const float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    const float t = tanhApprox(kGeluK * (x + kGeluA * x * x * x));
    const float dgelu =
        0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    d[i] *= dgelu;
  }
}

}  // namespace

void geluForward(float* out, const float* in, std::int64_t count) {
#pragma omp parallel for schedule(static) if (worthThreads(count))
  for (std::int64_t c = 0; c < count; c += kChunk)
    geluForwardChunk(out + c, in + c, std::min(kChunk, count - c));
}

void geluBackward(float* d, const float* in, std::int64_t count) {
#pragma omp parallel for schedule(static) if (worthThreads(count))
  for (std::int64_t c = 0; c < count; c += kChunk)
    geluBackwardChunk(d + c, in + c, std::min(kChunk, count - c));
}

void attentionForward(float* out, float* att, const float* qkv, int batch, int T, int C,
                      int heads) {
  const int D = C / heads;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
  // One (batch, head) per work item, its products single-threaded BLAS calls. The upper
  // triangle of the scores is computed and then zeroed: half that product is wasted, but one
  // full sgemm is faster than T row-sized ones.
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(batch) * heads * T * T))
  for (int bh = 0; bh < batch * heads; ++bh) {
    const int b = bh / heads, h = bh % heads;
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    float* p = att + bh * tt;
    gemm(false, true, T, T, D, scale, base + h * D, ld, base + C + h * D, ld, 0.0f, p, T);
    for (int i = 0; i < T; ++i) {
      float* r = p + static_cast<std::int64_t>(i) * T;
      float mx = r[0];
#pragma omp simd reduction(max : mx)
      for (int j = 1; j <= i; ++j) mx = r[j] > mx ? r[j] : mx;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= i; ++j) {
        r[j] = expApprox(r[j] - mx);
        sum += r[j];
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j <= i; ++j) r[j] *= inv;
      for (int j = i + 1; j < T; ++j) r[j] = 0.0f;
    }
    gemm(false, false, T, D, T, 1.0f, p, T, base + 2 * C + h * D, ld, 0.0f,
         out + static_cast<std::int64_t>(b) * T * C + h * D, C);
  }
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int batch, int T, int C, int heads) {
  const int D = C / heads;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(batch) * heads * T * T))
  for (int bh = 0; bh < batch * heads; ++bh) {
    const int b = bh / heads, h = bh % heads;
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    float* dbase = dqkv + static_cast<std::int64_t>(b) * T * ld;
    const float* dob = dout + static_cast<std::int64_t>(b) * T * C + h * D;
    const float* p = att + bh * tt;
    float* d = datt + bh * tt;
    // out = P V: dV = P^T dout, dP = dout V^T.
    gemm(true, false, T, D, T, 1.0f, p, T, dob, C, 0.0f, dbase + 2 * C + h * D, ld);
    gemm(false, true, T, T, D, 1.0f, dob, C, base + 2 * C + h * D, ld, 0.0f, d, T);
    // Through the softmax: dS = P (dP - sum_j P dP). Above the diagonal P is 0, so dS is too.
    for (int i = 0; i < T; ++i) {
      const float* pr = p + static_cast<std::int64_t>(i) * T;
      float* dr = d + static_cast<std::int64_t>(i) * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; ++j) dot += pr[j] * dr[j];
      for (int j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
      for (int j = i + 1; j < T; ++j) dr[j] = 0.0f;
    }
    // S = scale Q K^T: dQ = scale dS K, dK = scale dS^T Q.
    gemm(false, false, T, D, T, scale, d, T, base + C + h * D, ld, 0.0f, dbase + h * D, ld);
    gemm(true, false, T, D, T, scale, d, T, base + h * D, ld, 0.0f, dbase + C + h * D, ld);
  }
}

void embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                      int batch, int T, int C) {
  const std::int64_t n = static_cast<std::int64_t>(batch) * T;
#pragma omp parallel for schedule(static) if (worthThreads(n * C))
  for (std::int64_t i = 0; i < n; ++i) {
    const float* e = row(wte, tokens[i], C);
    const float* p = row(wpe, i % T, C);
    float* o = row(x, i, C);
    for (int j = 0; j < C; ++j) o[j] = e[j] + p[j];
  }
}

void embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                       int batch, int T, int C) {
  if (!dwte && !dwpe) return;
  // Threads split the columns, so rows that share a token add in sequence order on one thread:
  // no races and the same sum every run.
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(batch) * T * C))
  for (int j0 = 0; j0 < C; j0 += 16) {
    const int j1 = std::min(C, j0 + 16);
    if (dwpe)
      for (int t = 0; t < T; ++t) {
        float* p = row(dwpe, t, C);
        for (int j = j0; j < j1; ++j) p[j] = 0.0f;
      }
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < T; ++t) {
        const std::int64_t i = static_cast<std::int64_t>(b) * T + t;
        const float* g = row(dx, i, C);
        if (dwte && dwpe) {
          float* e = row(dwte, tokens[i], C);
          float* p = row(dwpe, t, C);
          for (int j = j0; j < j1; ++j) {
            e[j] += g[j];
            p[j] += g[j];
          }
        } else {
          float* e = dwte ? row(dwte, tokens[i], C) : row(dwpe, t, C);
          for (int j = j0; j < j1; ++j) e[j] += g[j];
        }
      }
    }
  }
}

double crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, int n,
                           int V) {
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(n) * V))
  for (int i = 0; i < n; ++i) {
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
      l[j] = expApprox(l[j] - mx);
      sum += l[j];
    }
    rowLoss[i] = std::log(sum) - target;
    const float inv = 1.0f / sum;
    for (int j = 0; j < V; ++j) l[j] *= inv;
  }
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += rowLoss[i];
  return total / n;
}

void crossEntropyBackward(float* probs, const std::uint8_t* targets, int n, int V, double scale) {
  const float s = static_cast<float>(scale / n);
#pragma omp parallel for schedule(static) if (worthThreads(static_cast<std::int64_t>(n) * V))
  for (int i = 0; i < n; ++i) {
    float* p = row(probs, i, V);
    p[targets[i]] -= 1.0f;
    for (int j = 0; j < V; ++j) p[j] *= s;
  }
}

}  // namespace zrt::trainer::kernels
