// The CUDA kernels of the reference trainer's GPT-2 layers that are not matrix products (those
// go through cuBLAS: cublas_gemm.h): the same arrays, layouts and operations as
// gpt2_kernels.h's host kernels, over all n rows at once on a stream. Each launcher returns
// CUDA's error code (the caller checks it with ZRT_CHECK_CUDA), so this library depends on
// nothing but the CUDA runtime. Rows are tokens (n = batch x T); every array is row-major fp32
// but the token bytes.
// Sums over a row are one warp's, in a fixed order, so a GPU computes the same bits every run;
// they are not the host's bits (another order), so a GPU run agrees with `host` to fp32 rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace zrt::trainer::cuda {

// y[n,out] = (residual ? residual : 0) + b, broadcast over rows (a linear layer's output before
// its product accumulates onto it). `residual` may equal y.
cudaError_t fillBias(float* y, const float* b, const float* residual, int n, int out, cudaStream_t s);

// LayerNorm over each row of c values, eps 1e-5, keeping mean and 1/std per row.
cudaError_t layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                             const float* b, int n, int c, cudaStream_t s);
// dx += the input gradient; tmp = dy x-hat (its column sums are the weight's gradient).
cudaError_t layerNormBackward(float* dx, float* tmp, const float* dy, const float* x, const float* w,
                              const float* mean, const float* rstd, int n, int c, cudaStream_t s);

// GELU (tanh form) of `count` values: out = gelu(in), and `in` becomes gelu'(in).
cudaError_t geluForward(float* out, float* in, std::int64_t count, cudaStream_t s);
// d *= slope.
cudaError_t geluBackward(float* d, const float* slope, std::int64_t count, cudaStream_t s);

// `blocks` causal-attention score blocks of T x T, one per (sequence, head), row i of block k
// at (k x T + i) x T: row i becomes the softmax of its columns [0, i], 0 beyond.
cudaError_t causalSoftmax(float* scores, std::int64_t blocks, int T, cudaStream_t s);
// d (dP in) becomes dS = P (dP - sum_j P dP) on and below the diagonal, 0 above.
cudaError_t causalSoftmaxBackward(float* d, const float* p, std::int64_t blocks, int T, cudaStream_t s);

// x[i,:] = wte[tokens[i], :] + wpe[i mod T, :].
cudaError_t embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                             int n, int T, int C, cudaStream_t s);
// dwte[tokens[i], :] += dx[i, :] (dwte already holds the head's part); dwpe[t, :] = sum over the
// sequences. One thread per column adds the rows in order: no atomics, the same bits every run.
// Either may be null (frozen) and is then skipped.
cudaError_t embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                              int batch, int T, int C, cudaStream_t s);

// Softmax cross-entropy per row of logits [n, V], replaced by the probabilities; rowLoss[i] =
// -log p[i, targets[i]].
cudaError_t crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, int n, int V,
                                cudaStream_t s);
// probs become (p - onehot) x scale / n.
cudaError_t crossEntropyBackward(float* probs, const std::uint8_t* targets, int n, int V, double scale,
                                 cudaStream_t s);
// *out = the mean of rowLoss's n values, summed in order in double (one thread).
cudaError_t meanLoss(double* out, const float* rowLoss, int n, cudaStream_t s);

}  // namespace zrt::trainer::cuda
