// The GPT-2 layers' CUDA kernels (gpt2_cuda_kernels.h). Row kernels give each row one warp:
// its lanes stride the row and their partial sums meet by shuffles in a fixed pattern.
#include "tools/trainer/model/cuda/gpt2_cuda_kernels.h"

#include <cmath>

namespace zrt::trainer::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr float kGeluMaxZ = 80.0f;

__device__ float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The row this warp works on, or -1 past the last.
__device__ std::int64_t warpRow(std::int64_t rows) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  return r < rows ? r : -1;
}

unsigned rowBlocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

unsigned elementBlocks(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

__global__ void fillBiasKernel(float* y, const float* b, const float* residual, std::int64_t count, int out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = (residual ? residual[i] : 0.0f) + b[i % out];
}

__global__ void layerNormForwardKernel(float* out, float* mean, float* rstd, const float* x, const float* w,
                                       const float* b, int n, int c) {
  const std::int64_t r = warpRow(n);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  const float* xr = x + r * c;
  float sum = 0.0f;
  for (int j = lane; j < c; j += kWarp) sum += xr[j];
  const float m = warpSum(sum) / static_cast<float>(c);
  float var = 0.0f;
  for (int j = lane; j < c; j += kWarp) {
    const float d = xr[j] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warpSum(var) / static_cast<float>(c) + kLayerNormEps);
  float* o = out + r * c;
  for (int j = lane; j < c; j += kWarp) o[j] = (xr[j] - m) * s * w[j] + b[j];
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

__global__ void layerNormBackwardKernel(float* dx, float* tmp, const float* dy, const float* x, const float* w,
                                        const float* mean, const float* rstd, int n, int c) {
  const std::int64_t r = warpRow(n);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  const float* xr = x + r * c;
  const float* g = dy + r * c;
  float* t = tmp + r * c;
  const float m = mean[r], s = rstd[r];
  float sumG = 0.0f, sumGx = 0.0f;
  for (int j = lane; j < c; j += kWarp) {
    const float xhat = (xr[j] - m) * s;
    const float gw = g[j] * w[j];
    sumG += gw;
    sumGx += gw * xhat;
    t[j] = g[j] * xhat;
  }
  const float meanG = warpSum(sumG) / static_cast<float>(c);
  const float meanGx = warpSum(sumGx) / static_cast<float>(c);
  float* d = dx + r * c;
  for (int j = lane; j < c; j += kWarp) {
    const float xhat = (xr[j] - m) * s;
    d[j] += s * (g[j] * w[j] - meanG - xhat * meanGx);
  }
}

__global__ void geluForwardKernel(float* out, float* in, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = in[i];
    const float z = fminf(fmaxf(2.0f * kGeluK * (x + kGeluA * x * x * x), -kGeluMaxZ), kGeluMaxZ);
    const float e = expf(-z);
    const float s = 1.0f / (1.0f + e);
    out[i] = x * s;
    in[i] = s + 2.0f * x * s * (e * s) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  }
}

__global__ void geluBackwardKernel(float* d, const float* slope, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    d[i] *= slope[i];
}

// Row r of all blocks x T rows: row i = r mod T of its block.
__global__ void causalSoftmaxKernel(float* scores, std::int64_t rows, int T) {
  const std::int64_t r = warpRow(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  const int i = static_cast<int>(r % T);
  float* row = scores + r * T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += kWarp) mx = fmaxf(mx, row[j]);
  mx = warpMax(mx);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += kWarp) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warpSum(sum);
  for (int j = lane; j < T; j += kWarp) row[j] = j <= i ? row[j] * inv : 0.0f;
}

__global__ void causalSoftmaxBackwardKernel(float* d, const float* p, std::int64_t rows, int T) {
  const std::int64_t r = warpRow(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  const int i = static_cast<int>(r % T);
  float* dr = d + r * T;
  const float* pr = p + r * T;
  float dot = 0.0f;
  for (int j = lane; j <= i; j += kWarp) dot += pr[j] * dr[j];
  dot = warpSum(dot);
  for (int j = lane; j < T; j += kWarp) dr[j] = j <= i ? pr[j] * (dr[j] - dot) : 0.0f;
}

__global__ void embeddingForwardKernel(float* x, const std::uint8_t* tokens, const float* wte,
                                       const float* wpe, std::int64_t count, int T, int C) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = k / C;
    const int j = static_cast<int>(k % C);
    x[k] = wte[static_cast<std::int64_t>(tokens[i]) * C + j] + wpe[(i % T) * C + j];
  }
}

__global__ void embeddingBackwardKernel(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                                        int batch, int T, int C) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= C) return;
  if (dwpe)
    for (int t = 0; t < T; ++t) dwpe[static_cast<std::int64_t>(t) * C + j] = 0.0f;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < T; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * T + t;
      const float g = dx[i * C + j];
      if (dwte) dwte[static_cast<std::int64_t>(tokens[i]) * C + j] += g;
      if (dwpe) dwpe[static_cast<std::int64_t>(t) * C + j] += g;
    }
}

__global__ void crossEntropyForwardKernel(float* logits, float* rowLoss, const std::uint8_t* targets, int n,
                                          int V) {
  const std::int64_t r = warpRow(n);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  float* l = logits + r * V;
  float mx = -INFINITY;
  for (int j = lane; j < V; j += kWarp) mx = fmaxf(mx, l[j]);
  mx = warpMax(mx);
  // -log p[target] from the shifted logit, not the log of the probability, which underflows for
  // confident wrong predictions. Read before the row is overwritten (every lane reads it first).
  const float target = l[targets[r]] - mx;
  __syncwarp();
  float sum = 0.0f;
  for (int j = lane; j < V; j += kWarp) {
    const float e = expf(l[j] - mx);
    l[j] = e;
    sum += e;
  }
  sum = warpSum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < V; j += kWarp) l[j] *= inv;
  if (lane == 0) rowLoss[r] = logf(sum) - target;
}

__global__ void crossEntropyBackwardKernel(float* probs, const std::uint8_t* targets, std::int64_t count,
                                           int V, float f) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = k / V;
    const int j = static_cast<int>(k % V);
    probs[k] = (j == targets[i] ? probs[k] - 1.0f : probs[k]) * f;
  }
}

__global__ void meanLossKernel(double* out, const float* rowLoss, int n) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += rowLoss[i];
  *out = total / n;
}

}  // namespace

cudaError_t fillBias(float* y, const float* b, const float* residual, int n, int out, cudaStream_t s) {
  const std::int64_t count = static_cast<std::int64_t>(n) * out;
  if (count == 0) return cudaSuccess;
  fillBiasKernel<<<elementBlocks(count), kThreads, 0, s>>>(y, b, residual, count, out);
  return cudaGetLastError();
}

cudaError_t layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                             const float* b, int n, int c, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  layerNormForwardKernel<<<rowBlocks(n), kWarpsPerBlock * kWarp, 0, s>>>(out, mean, rstd, x, w, b, n, c);
  return cudaGetLastError();
}

cudaError_t layerNormBackward(float* dx, float* tmp, const float* dy, const float* x, const float* w,
                              const float* mean, const float* rstd, int n, int c, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  layerNormBackwardKernel<<<rowBlocks(n), kWarpsPerBlock * kWarp, 0, s>>>(dx, tmp, dy, x, w, mean, rstd, n, c);
  return cudaGetLastError();
}

cudaError_t geluForward(float* out, float* in, std::int64_t count, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  geluForwardKernel<<<elementBlocks(count), kThreads, 0, s>>>(out, in, count);
  return cudaGetLastError();
}

cudaError_t geluBackward(float* d, const float* slope, std::int64_t count, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  geluBackwardKernel<<<elementBlocks(count), kThreads, 0, s>>>(d, slope, count);
  return cudaGetLastError();
}

cudaError_t causalSoftmax(float* scores, std::int64_t blocks, int T, cudaStream_t s) {
  const std::int64_t rows = blocks * T;
  if (rows == 0) return cudaSuccess;
  causalSoftmaxKernel<<<rowBlocks(rows), kWarpsPerBlock * kWarp, 0, s>>>(scores, rows, T);
  return cudaGetLastError();
}

cudaError_t causalSoftmaxBackward(float* d, const float* p, std::int64_t blocks, int T, cudaStream_t s) {
  const std::int64_t rows = blocks * T;
  if (rows == 0) return cudaSuccess;
  causalSoftmaxBackwardKernel<<<rowBlocks(rows), kWarpsPerBlock * kWarp, 0, s>>>(d, p, rows, T);
  return cudaGetLastError();
}

cudaError_t embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                             int n, int T, int C, cudaStream_t s) {
  const std::int64_t count = static_cast<std::int64_t>(n) * C;
  if (count == 0) return cudaSuccess;
  embeddingForwardKernel<<<elementBlocks(count), kThreads, 0, s>>>(x, tokens, wte, wpe, count, T, C);
  return cudaGetLastError();
}

cudaError_t embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                              int batch, int T, int C, cudaStream_t s) {
  if ((!dwte && !dwpe) || C == 0) return cudaSuccess;
  const unsigned threads = 128;
  embeddingBackwardKernel<<<(C + threads - 1) / threads, threads, 0, s>>>(dwte, dwpe, dx, tokens, batch, T, C);
  return cudaGetLastError();
}

cudaError_t crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, int n, int V,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  crossEntropyForwardKernel<<<rowBlocks(n), kWarpsPerBlock * kWarp, 0, s>>>(logits, rowLoss, targets, n, V);
  return cudaGetLastError();
}

cudaError_t crossEntropyBackward(float* probs, const std::uint8_t* targets, int n, int V, double scale,
                                 cudaStream_t s) {
  const std::int64_t count = static_cast<std::int64_t>(n) * V;
  if (count == 0) return cudaSuccess;
  crossEntropyBackwardKernel<<<elementBlocks(count), kThreads, 0, s>>>(probs, targets, count, V,
                                                                       static_cast<float>(scale / n));
  return cudaGetLastError();
}

cudaError_t meanLoss(double* out, const float* rowLoss, int n, cudaStream_t s) {
  meanLossKernel<<<1, 1, 0, s>>>(out, rowLoss, n);
  return cudaGetLastError();
}

}  // namespace zrt::trainer::cuda
