#include "tools/trainer/model/gpt2_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>

namespace zrt::trainer::kernels {

namespace {

constexpr float kLayerNormEps = 1e-5f;

// Row r of a row-major array with `cols` columns; the products are done in size_t because
// batch x T x 4C overflows int at sizes a user may ask for.
inline float* row(float* base, std::int64_t r, std::int64_t cols) { return base + r * cols; }
inline const float* row(const float* base, std::int64_t r, std::int64_t cols) {
  return base + r * cols;
}

}  // namespace

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual,
                   int n, int in, int out) {
  // The bias (and residual) go in first so the product accumulates onto them (beta = 1): one
  // pass over y instead of a product pass and a separate bias pass.
#pragma omp parallel for schedule(static)
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
  gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 0.0f, dW, out);
  cblas_sgemv(CblasRowMajor, CblasTrans, n, out, 1.0f, dy, out, ones, 1, 0.0f, db, 1);
  if (dx) gemm(false, true, n, in, out, 1.0f, dy, out, W, out, accumulateDx ? 1.0f : 0.0f, dx, in);
}

void layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, int n, int c) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const float* xr = row(x, i, c);
    float sum = 0.0f;
    for (int j = 0; j < c; ++j) sum += xr[j];
    const float m = sum / static_cast<float>(c);
    float var = 0.0f;
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
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const float* xr = row(x, i, c);
    const float* g = row(dy, i, c);
    float* t = row(tmp, i, c);
    const float m = mean[i], s = rstd[i];
    float sumG = 0.0f, sumGx = 0.0f;
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
  cblas_sgemv(CblasRowMajor, CblasTrans, n, c, 1.0f, tmp, c, ones, 1, 0.0f, dw, 1);
  cblas_sgemv(CblasRowMajor, CblasTrans, n, c, 1.0f, dy, c, ones, 1, 0.0f, db, 1);
}

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr std::int64_t kChunk = 4096;  // elements per OpenMP work item of the element-wise loops

// tanh through exp, both written as plain arithmetic so the loops around them vectorise: libm's
// tanhf is a scalar call per element and was the largest cost after the matrix products.
// exp: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (error < 2e-8
// relative), times 2^n built in the exponent bits. The rounding of x log2(e) to n adds and
// subtracts 1.5 x 2^23, which works in the default rounding mode without SSE4.1's round.
// Accurate to about 2 ulp, which the PyTorch comparison (1e-5 of the logits' scale) cannot see.
// Clamps are ternaries on values: std::min/max return references, which GCC does not turn into
// vector min/max, and the loop then does not vectorise.
inline float clamp(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

inline float expApprox(float x) {
  x = clamp(x, -87.0f, 88.0f);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto bits = static_cast<std::int32_t>(n) + 127;
  return p * std::bit_cast<float>(bits << 23);
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): no cancellation near 1 (where GELU needs it), and an absolute
// error of a few 1e-8 near 0, where GELU's 0.5 x (1 + tanh) only needs it absolute. |u| > 9
// gives +-1 exactly in fp32 anyway; the clamp keeps e^{2u} finite.
inline float tanhApprox(float u) {
  u = clamp(u, -9.0f, 9.0f);
  return 1.0f - 2.0f / (expApprox(2.0f * u) + 1.0f);
}

void geluForwardChunk(float* out, const float* in, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhApprox(kGeluK * (x + kGeluA * x * x * x)));
  }
}

void geluBackwardChunk(float* d, const float* in, std::int64_t count) {
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
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < count; c += kChunk)
    geluForwardChunk(out + c, in + c, std::min(kChunk, count - c));
}

void geluBackward(float* d, const float* in, std::int64_t count) {
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < count; c += kChunk)
    geluBackwardChunk(d + c, in + c, std::min(kChunk, count - c));
}

void attentionForward(float* out, float* att, const float* qkv, int batch, int T, int C,
                      int heads) {
  const int D = C / heads;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
  // Scores for every (batch, head): each a small product BLAS threads on its own. The upper
  // triangle is computed and then zeroed: half the product is wasted, but one full sgemm is
  // faster than T row-sized ones.
  for (int b = 0; b < batch; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    for (int h = 0; h < heads; ++h) {
      gemm(false, true, T, T, D, scale, base + h * D, ld, base + C + h * D, ld, 0.0f,
           att + (static_cast<std::int64_t>(b) * heads + h) * tt, T);
    }
  }
  const std::int64_t rows = static_cast<std::int64_t>(batch) * heads * T;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const int i = static_cast<int>(r % T);
    float* p = att + r * T;
    float mx = p[0];
    for (int j = 1; j <= i; ++j) mx = std::max(mx, p[j]);
    float sum = 0.0f;
    for (int j = 0; j <= i; ++j) {
      p[j] = std::exp(p[j] - mx);
      sum += p[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j <= i; ++j) p[j] *= inv;
    for (int j = i + 1; j < T; ++j) p[j] = 0.0f;
  }
  for (int b = 0; b < batch; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    for (int h = 0; h < heads; ++h) {
      gemm(false, false, T, D, T, 1.0f, att + (static_cast<std::int64_t>(b) * heads + h) * tt, T,
           base + 2 * C + h * D, ld, 0.0f, out + static_cast<std::int64_t>(b) * T * C + h * D, C);
    }
  }
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int batch, int T, int C, int heads) {
  const int D = C / heads;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t tt = static_cast<std::int64_t>(T) * T;
  // out = P V: dV = P^T dout, dP = dout V^T.
  for (int b = 0; b < batch; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    float* dbase = dqkv + static_cast<std::int64_t>(b) * T * ld;
    const float* dob = dout + static_cast<std::int64_t>(b) * T * C;
    for (int h = 0; h < heads; ++h) {
      const std::int64_t bh = static_cast<std::int64_t>(b) * heads + h;
      gemm(true, false, T, D, T, 1.0f, att + bh * tt, T, dob + h * D, C, 0.0f,
           dbase + 2 * C + h * D, ld);
      gemm(false, true, T, T, D, 1.0f, dob + h * D, C, base + 2 * C + h * D, ld, 0.0f,
           datt + bh * tt, T);
    }
  }
  // Through the softmax: dS = P (dP - sum_j P dP). Above the diagonal P is 0, so dS is too.
  const std::int64_t rows = static_cast<std::int64_t>(batch) * heads * T;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const int i = static_cast<int>(r % T);
    const float* p = att + r * T;
    float* d = datt + r * T;
    float dot = 0.0f;
    for (int j = 0; j <= i; ++j) dot += p[j] * d[j];
    for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot);
    for (int j = i + 1; j < T; ++j) d[j] = 0.0f;
  }
  // S = scale Q K^T: dQ = scale dS K, dK = scale dS^T Q.
  for (int b = 0; b < batch; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * ld;
    float* dbase = dqkv + static_cast<std::int64_t>(b) * T * ld;
    for (int h = 0; h < heads; ++h) {
      const float* ds = datt + (static_cast<std::int64_t>(b) * heads + h) * tt;
      gemm(false, false, T, D, T, scale, ds, T, base + C + h * D, ld, 0.0f, dbase + h * D, ld);
      gemm(true, false, T, D, T, scale, ds, T, base + h * D, ld, 0.0f, dbase + C + h * D, ld);
    }
  }
}

void embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                      int batch, int T, int C) {
  const std::int64_t n = static_cast<std::int64_t>(batch) * T;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* e = row(wte, tokens[i], C);
    const float* p = row(wpe, i % T, C);
    float* o = row(x, i, C);
    for (int j = 0; j < C; ++j) o[j] = e[j] + p[j];
  }
}

void embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                       int batch, int T, int C) {
  // Threads split the columns, so rows that share a token add in sequence order on one thread:
  // no races and the same sum every run.
#pragma omp parallel for schedule(static)
  for (int j0 = 0; j0 < C; j0 += 16) {
    const int j1 = std::min(C, j0 + 16);
    for (int t = 0; t < T; ++t) {
      float* p = row(dwpe, t, C);
      for (int j = j0; j < j1; ++j) p[j] = 0.0f;
    }
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < T; ++t) {
        const std::int64_t i = static_cast<std::int64_t>(b) * T + t;
        const float* g = row(dx, i, C);
        float* e = row(dwte, tokens[i], C);
        float* p = row(dwpe, t, C);
        for (int j = j0; j < j1; ++j) {
          e[j] += g[j];
          p[j] += g[j];
        }
      }
    }
  }
}

double crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, int n,
                           int V) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    float* l = row(logits, i, V);
    float mx = l[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, l[j]);
    // -log p[target] from the shifted logit, not the log of the probability, which underflows
    // for confident wrong predictions.
    const float target = l[targets[i]] - mx;
    float sum = 0.0f;
    for (int j = 0; j < V; ++j) {
      l[j] = std::exp(l[j] - mx);
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
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    float* p = row(probs, i, V);
    p[targets[i]] -= 1.0f;
    for (int j = 0; j < V; ++j) p[j] *= s;
  }
}

}  // namespace zrt::trainer::kernels
