// The layer kernels GPT-2 is built from, forward and backward, on fp32 row-major arrays: matrix
// products through cblas_sgemm, the rest OpenMP loops over rows. Rows are tokens (n = batch x T);
// a linear layer's weight is [in, out] (HF's Conv1D), so y = x W + b.
// Every kernel writes its outputs whole (no hidden accumulation) unless its name or a parameter
// says it accumulates; none allocates. Results do not depend on the thread count except through
// BLAS's own blocking, so one process computes the same bits twice (checkpointing relies on it).
// Thread-safety: call from one thread; kernels use OpenMP and BLAS threads inside.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::trainer::kernels {

// Below this many elements a pass runs on the calling thread alone: waking the pool costs more
// than it saves, and much more on a machine shared with other work (a test's tiny model).
inline constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 15;
inline bool worthThreads(std::int64_t elements) { return elements >= kParallelMinElements; }

// BLAS runs single-threaded inside each call: the kernels parallelise products themselves, over
// the same OpenMP threads as the element-wise loops (two thread pools on the same cores spin
// against each other). Gpt2 calls this once at construction.
void initThreads();
// The kernel set OpenBLAS chose for this CPU ("SkylakeX", "Haswell", "Prescott"...).
std::string blasCoreName();

// C[M,N] = alpha op(A) op(B) + beta C, row-major; op transposes when the flag says so. Split by
// rows over the OpenMP threads, unless called inside a parallel region.
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// out[j] = sum over the n rows of x[i, j] (`ones` holds n ones): bias gradients.
void columnSums(float* out, const float* x, const float* ones, int n, int cols);

// y[n,out] = (residual ? residual : 0) + b + x[n,in] W[in,out]. `residual` may equal `y`.
void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual,
                   int n, int in, int out);
// dW = x^T dy, db = column sums of dy (via `ones`, n ones), and dx = dy W^T (dx += when
// `accumulateDx`). Each output is skipped when null (a frozen weight has no gradient).
void linearBackward(const float* dy, const float* x, const float* W, float* dx, float* dW,
                    float* db, const float* ones, int n, int in, int out, bool accumulateDx);

// LayerNorm over each row of c values, eps 1e-5; keeps mean and 1/std per row for backward.
void layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, int n, int c);
// dx += the input gradient; dw, db written (each skipped when null). `tmp` holds n x c floats of
// scratch.
void layerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, const float* mean, const float* rstd, float* tmp,
                       const float* ones, int n, int c);

// GELU, tanh approximation (GPT-2's gelu_new): out = gelu(in), count elements.
void geluForward(float* out, const float* in, std::int64_t count);
// d (in place) = d * gelu'(in).
void geluBackward(float* d, const float* in, std::int64_t count);

// Causal multi-head self-attention. qkv is [b, T, 3C] (q, k, v, each with its heads contiguous);
// att [b, heads, T, T] keeps the softmax probabilities (zero above the diagonal); out [b, T, C].
void attentionForward(float* out, float* att, const float* qkv, int batch, int T, int C, int heads);
// From dout [b, T, C]: dqkv [b, T, 3C] written; datt [b, heads, T, T] is scratch.
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int batch, int T, int C, int heads);

// x[b,t,:] = wte[tokens[b,t], :] + wpe[t, :].
void embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                      int batch, int T, int C);
// dwte[tokens[b,t], :] += dx[b,t,:] (dwte already holds the head's part); dwpe[t,:] = sum over b.
// Either may be null (frozen), and is then skipped.
void embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                       int batch, int T, int C);

// LoRA's low-rank path beside a linear layer (lora.h): u[n,r] = x[n,in] A^T with A [r,in], kept
// for backward, then y[n,out] += scale u B^T with B [out,r]. With y null only u is computed (the
// recomputation that activation checkpointing needs for a layer whose output it does not redo).
void loraForward(float* y, float* u, const float* x, const float* A, const float* B, float scale,
                 int n, int in, int out, int r);
// Backward of that path from dy [n,out]: du = scale dy B into `du` [n,r] (scratch), then
// dB = scale dy^T u, dA = du^T x (each skipped when null), and dx += du A.
void loraBackward(const float* dy, const float* x, const float* u, const float* A, const float* B,
                  float scale, float* du, float* dx, float* dA, float* dB, int n, int in, int out,
                  int r);

// Softmax cross-entropy per row of `logits` [n, V], which are replaced by the probabilities.
// rowLoss[i] = -log p[i, targets[i]]; returns their mean, summed in a fixed order.
double crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, int n,
                           int V);
// probs (in place) becomes d(scale x mean loss)/dlogits = (p - onehot) x scale / n.
void crossEntropyBackward(float* probs, const std::uint8_t* targets, int n, int V, double scale);

}  // namespace zrt::trainer::kernels
