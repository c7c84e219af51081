// The layer kernels GPT-2 is built from, forward and backward, on fp32 row-major arrays: matrix
// products through oneDNN's sgemm (or OpenBLAS's: ZRT_GPT2_GEMM, below), column sums through
// OpenBLAS's sgemv, the rest vectorised loops. Rows are tokens (n = batch x T); a linear layer's
// weight is [in, out] (HF's Conv1D), so y = x W + b.
//
// Kernels are meant to run on every thread of an OpenMP parallel region, each thread doing its
// share, with no barrier at the end; so a caller runs a chain of kernels in one region and puts a
// barrier only where a kernel reads what another thread wrote. Two kinds:
//  - row kernels take the calling thread's rows (a Span of the n rows; of the (sequence, head)
//    pairs for attention) and touch only those rows of their row-indexed arrays: a chain of them
//    on the same rows needs no barrier;
//  - team kernels (weight gradients, products) take whole arrays, read every row, and each
//    thread writes its own part of the output (threadShare of its columns or rows).
// Outside a parallel region, or in a region of one thread, the calling thread does it all.
//
// Every kernel writes its outputs whole (no hidden accumulation) unless its name or a parameter
// says it accumulates; none allocates but attention, which keeps a per-thread scratch of one
// head's K or V transposed (D x T floats), grown on first use. How work is split depends only
// on the sizes and the team size, and each output element is computed by one thread in a fixed
// order, so a process computes the same bits every time (checkpointing's recomputation relies
// on it).
// Thread-safety: as above; BLAS runs single-threaded inside each call.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::trainer::kernels {

// Below this many elements a pass is not worth a parallel region: waking the pool costs more
// than it saves, and much more on a machine shared with other work (a test's tiny model).
inline constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 15;
inline bool worthThreads(std::int64_t elements) { return elements >= kParallelMinElements; }
// A product's multiply-adds per element of an element-wise pass, roughly, in time.
inline constexpr std::int64_t kProductWorkPerElement = 32;
// Whether a product M x N x K (or a region whose largest product it is) is worth the threads.
inline bool worthThreads(std::int64_t M, std::int64_t N, std::int64_t K) {
  return worthThreads(M * N * K / kProductWorkPerElement);
}

// Rows (and columns) are shared out in whole multiples of this (a BLAS kernel's register
// block), so no thread gets a sliver.
inline constexpr int kRowGranule = 16;

// The calling thread's share [begin, end) of `count` items, in whole granules spread as evenly
// as they go; all of them outside an active parallel region.
struct Span {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};
Span threadShare(int count, int granule);

// BLAS runs single-threaded inside each call: the kernels share the work out themselves, over
// the same OpenMP threads as the element-wise loops (two thread pools on the same cores spin
// against each other). Gpt2 calls this once at construction; it also reads ZRT_GPT2_GEMM (below),
// so a bad value fails there, before any product.
void initThreads();

// The library the matrix products go through, for the whole process: oneDNN's dnnl_sgemm (the
// default) or OpenBLAS's cblas_sgemm, chosen by the environment variable ZRT_GPT2_GEMM
// ("onednn" or "openblas"; unset or empty: oneDNN), read once. OpenBLAS is there to tell the
// library's share of a step's time from the code's (tools/trainer/speed_vs_torch.py runs both);
// the two round differently, so a process never mixes them. Column sums use OpenBLAS's sgemv
// either way.
enum class GemmLibrary { OneDnn, OpenBlas };
inline constexpr const char* kGemmLibraryVariable = "ZRT_GPT2_GEMM";
// nullptr or "" is oneDNN; "onednn" and "openblas" name themselves; anything else throws
// InvalidArgument naming the variable and the values it takes.
GemmLibrary parseGemmLibrary(const char* value);
// This process's choice (ZRT_GPT2_GEMM read on the first call).
GemmLibrary gemmLibrary();
// "oneDNN's dnnl_sgemm" or "OpenBLAS's cblas_sgemm".
const char* gemmLibraryName(GemmLibrary library);

// One product on the calling thread through `library` (gemm below uses gemmLibrary()): C[M,N] =
// alpha op(A) op(B) + beta C, row-major.
void sgemmOn(GemmLibrary library, bool transA, bool transB, int M, int N, int K, float alpha,
             const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

// Team: C[M,N] = alpha op(A) op(B) + beta C, row-major; op transposes when the flag says so.
// Each thread computes a block of C, split along its longer side (each thread packs the whole of
// the operand it does not split, so that one should be the smaller).
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// Team: out[j] = sum over the n rows of x[i, j] (`ones` holds n ones): bias gradients. Split by
// columns.
void columnSums(float* out, const float* x, const float* ones, int n, int cols);

// Rows: y[n,out] = (residual ? residual : 0) + b + x[n,in] W[in,out]. `residual` may equal y.
void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual,
                   Span rows, int in, int out);
// Rows: dx = dy W^T (dx += when `accumulate`).
void linearInputGrad(float* dx, const float* dy, const float* W, Span rows, int in, int out,
                     bool accumulate);
// Team: dW = x^T dy (split as gemm), db = column sums of dy (`ones` holds n ones). Each output
// is skipped when null (a frozen weight has no gradient).
void linearParamGrads(float* dW, float* db, const float* dy, const float* x, const float* ones,
                      int n, int in, int out);

// Rows: LayerNorm over each row of c values, eps 1e-5; keeps mean and 1/std per row.
void layerNormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, Span rows, int c);
// Rows: dx += the input gradient, and tmp [n, c] = dy x-hat (for layerNormParamGrads).
void layerNormBackward(float* dx, float* tmp, const float* dy, const float* x, const float* w,
                       const float* mean, const float* rstd, Span rows, int c);
// Team: dw = column sums of tmp, db = column sums of dy (each skipped when null).
void layerNormParamGrads(float* dw, float* db, const float* dy, const float* tmp,
                         const float* ones, int n, int c);

// Rows of `cols` values: GELU, tanh approximation (GPT-2's gelu_new): out = gelu(in), and `in`
// is replaced by gelu'(in), the slope backward needs.
void geluForward(float* out, float* in, Span rows, int cols);
// Rows: d (in place) = d * slope, the slope geluForward left.
void geluBackward(float* d, const float* slope, Span rows, int cols);

// Causal multi-head self-attention over `pairs`, a span of the (sequence, head) pairs numbered
// sequence x heads + head: reads every row of the sequences it works on. qkv is [b, T, 3C] (q,
// k, v, each with its heads contiguous); att [b, heads, T, T] keeps the softmax probabilities
// on and below the diagonal, in blocks of rows: the blocks above it are never computed, read or
// written (causal masking skips them). out [b, T, C].
void attentionForward(float* out, float* att, const float* qkv, Span pairs, int T, int C,
                      int heads);
// From dout [b, T, C]: dqkv [b, T, 3C] written; datt [b, heads, T, T] is scratch.
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, Span pairs, int T, int C, int heads);

// Rows: x[b,t,:] = wte[tokens[b,t], :] + wpe[t, :].
void embeddingForward(float* x, const std::uint8_t* tokens, const float* wte, const float* wpe,
                      Span rows, int T, int C);
// Team, split by columns: dwte[tokens[b,t], :] += dx[b,t,:] (dwte already holds the head's part);
// dwpe[t,:] = sum over b. Either may be null (frozen), and is then skipped.
void embeddingBackward(float* dwte, float* dwpe, const float* dx, const std::uint8_t* tokens,
                       int batch, int T, int C);

// LoRA's low-rank path beside a linear layer (lora.h), rows: u[n,r] = x[n,in] A^T with A
// [r,in], kept for backward, then y[n,out] += scale u B^T with B [out,r]. With y null only u is
// computed (the recomputation that activation checkpointing needs for a layer whose output it
// does not redo).
void loraForward(float* y, float* u, const float* x, const float* A, const float* B, float scale,
                 Span rows, int in, int out, int r);
// Backward of that path from dy [n,out], in three steps with a barrier after the first:
//   loraDu (rows): du [n,r] = scale dy B (du is scratch);
//   loraParamGrads (team): dB = scale dy^T u, dA = du^T x (each skipped when null);
//   loraInputGrad (rows): dx += du A.
void loraDu(float* du, const float* dy, const float* B, float scale, Span rows, int out, int r);
void loraParamGrads(float* dA, float* dB, const float* dy, const float* x, const float* u,
                    const float* du, float scale, int n, int in, int out, int r);
void loraInputGrad(float* dx, const float* du, const float* A, Span rows, int in, int r);

// Rows: softmax cross-entropy per row of `logits` [n, V], which are replaced by the
// probabilities; rowLoss[i] = -log p[i, targets[i]].
void crossEntropyForward(float* logits, float* rowLoss, const std::uint8_t* targets, Span rows,
                         int V);
// The mean of rowLoss, summed in a fixed order (one thread).
double meanLoss(const float* rowLoss, int n);
// Rows: probs (in place) becomes d(scale x mean loss)/dlogits = (p - onehot) x scale / n.
void crossEntropyBackward(float* probs, const std::uint8_t* targets, Span rows, int n, int V,
                          double scale);

}  // namespace zrt::trainer::kernels
