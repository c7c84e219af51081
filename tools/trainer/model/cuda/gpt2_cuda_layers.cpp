// GPT-2's layers on a GPU (gpt2_gpu_layers.h): gpt2.cpp's host phases operation for operation,
// the products through cuBLAS (cublas_gemm.h) and the rest as gpt2_cuda_kernels.h's kernels,
// all on the model's compute stream. Attention computes each sequence's heads as batched
// products over the whole T x T square; the softmax zeroes what lies above the diagonal, where
// the host kernels skip those blocks instead.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "tools/trainer/model/cuda/cublas_gemm.h"
#include "tools/trainer/model/cuda/gpt2_cuda_kernels.h"
#include "tools/trainer/model/gpt2_gpu_layers.h"

namespace zrt::trainer {

namespace {

namespace kc = cuda;

class CudaLayers final : public GpuLayers {
 public:
  CudaLayers(const Gpt2LayerShape& shape, Device& device, Stream& stream)
      : s_(shape), device_(device), stream_(stream), cs_(static_cast<cudaStream_t>(stream.native())), blas_(cs_) {}

  void embeddingForward(const ActivationBuffers& A, float* x, const std::vector<const float*>& p,
                        int batch) override {
    ZRT_CHECK_CUDA(kc::embeddingForward(x, A.inputs(), p[0], p[1], batch * s_.T, s_.T, s_.C, cs_));
  }

  void blockForward(const ActivationBuffers& /*A*/, const BlockActs& a, const std::vector<const float*>& p,
                    const float* in, float* out, int batch) override {
    const int n = batch * s_.T, C = s_.C;
    ZRT_CHECK_CUDA(kc::layerNormForward(a.ln1, a.mean1, a.rstd1, in, p[kLn1W], p[kLn1B], n, C, cs_));
    linearForward(a.qkv, a.ln1, p[kAttnW], p[kAttnB], nullptr, n, C, 3 * C);
    adapt(LoraTarget::Qkv, a, p, a.ln1, a.qkv, n);
    attentionForward(a, batch);
    linearForward(a.xmid, a.atty, p[kProjW], p[kProjB], in, n, C, C);
    adapt(LoraTarget::Proj, a, p, a.atty, a.xmid, n);
    ZRT_CHECK_CUDA(kc::layerNormForward(a.ln2, a.mean2, a.rstd2, a.xmid, p[kLn2W], p[kLn2B], n, C, cs_));
    linearForward(a.fch, a.ln2, p[kFcW], p[kFcB], nullptr, n, C, 4 * C);
    adapt(LoraTarget::Fc, a, p, a.ln2, a.fch, n);
    ZRT_CHECK_CUDA(kc::geluForward(a.fchg, a.fch, static_cast<std::int64_t>(n) * 4 * C, cs_));
    if (out) linearForward(out, a.fchg, p[kFcProjW], p[kFcProjB], a.xmid, n, 4 * C, C);
    adapt(LoraTarget::MlpProj, a, p, a.fchg, out, n);
  }

  void lnfForward(const ActivationBuffers& A, const float* x, const std::vector<const float*>& p,
                  int batch) override {
    ZRT_CHECK_CUDA(kc::layerNormForward(A.lnf, A.meanf, A.rstdf, x, p[0], p[1], batch * s_.T, s_.C, cs_));
  }

  void head(const ActivationBuffers& A, const float* wte, int batch, double seed, bool loss, bool train) override {
    const int n = batch * s_.T, C = s_.C, V = s_.V;
    blas_.gemm(false, true, n, V, C, 1.0f, A.lnf, C, wte, C, 0.0f, A.logits, V);
    if (!loss) return;
    ZRT_CHECK_CUDA(kc::crossEntropyForward(A.logits, A.rowLoss, A.targets(), n, V, cs_));
    ZRT_CHECK_CUDA(kc::meanLoss(A.loss(), A.rowLoss, n, cs_));
    if (!train) return;
    ZRT_CHECK_CUDA(kc::crossEntropyBackward(A.logits, A.targets(), n, V, seed, cs_));
    blas_.gemm(false, false, n, C, V, 1.0f, A.logits, V, wte, C, 0.0f, A.dln, C);
    if (s_.wteTrainable) blas_.gemm(true, false, V, C, n, 1.0f, A.logits, V, A.lnf, C, 0.0f, A.dwteHead, C);
  }

  void lnfBackward(const ActivationBuffers& A, const float* x, const std::vector<const float*>& p,
                   const std::vector<float*>& g, int batch) override {
    const int n = batch * s_.T;
    device_.memsetAsync(A.dres, 0, static_cast<std::size_t>(n) * s_.C * sizeof(float), stream_);
    layerNormBackward(A, g[0], g[1], A.dln, x, p[0], A.meanf, A.rstdf, n);
  }

  void blockBackward(const ActivationBuffers& A, const BlockActs& a, const std::vector<const float*>& p,
                     const std::vector<float*>& g, const float* in, int batch) override {
    const int n = batch * s_.T, C = s_.C;
    linearParamGrads(A, g[kFcProjW], g[kFcProjB], A.dres, a.fchg, n, 4 * C, C);
    linearInputGrad(A.dfch, A.dres, p[kFcProjW], n, 4 * C, C);
    adaptBack(A, LoraTarget::MlpProj, a, p, g, A.dres, a.fchg, A.dfch, n);
    ZRT_CHECK_CUDA(kc::geluBackward(A.dfch, a.fch, static_cast<std::int64_t>(n) * 4 * C, cs_));
    linearParamGrads(A, g[kFcW], g[kFcB], A.dfch, a.ln2, n, C, 4 * C);
    linearInputGrad(A.dln, A.dfch, p[kFcW], n, C, 4 * C);
    adaptBack(A, LoraTarget::Fc, a, p, g, A.dfch, a.ln2, A.dln, n);
    layerNormBackward(A, g[kLn2W], g[kLn2B], A.dln, a.xmid, p[kLn2W], a.mean2, a.rstd2, n);
    linearParamGrads(A, g[kProjW], g[kProjB], A.dres, a.atty, n, C, C);
    linearInputGrad(A.datty, A.dres, p[kProjW], n, C, C);
    adaptBack(A, LoraTarget::Proj, a, p, g, A.dres, a.atty, A.datty, n);
    attentionBackward(A, a, batch);
    linearParamGrads(A, g[kAttnW], g[kAttnB], A.dqkv, a.ln1, n, C, 3 * C);
    linearInputGrad(A.dln, A.dqkv, p[kAttnW], n, C, 3 * C);
    adaptBack(A, LoraTarget::Qkv, a, p, g, A.dqkv, a.ln1, A.dln, n);
    layerNormBackward(A, g[kLn1W], g[kLn1B], A.dln, in, p[kLn1W], a.mean1, a.rstd1, n);
  }

  void embeddingBackward(const ActivationBuffers& A, const std::vector<float*>& g, int batch) override {
    const int n = batch * s_.T, C = s_.C, V = s_.V;
    float* dwte = g[0];
    // wte's gradient holds both its uses: the head's part, then the lookup's rows added.
    if (dwte && s_.wteTrainable)
      device_.copyAsync(dwte, A.dwteHead, static_cast<std::size_t>(V) * C * sizeof(float), stream_);
    if (dwte && !s_.wteTrainable) blas_.gemm(true, false, V, C, n, 1.0f, A.logits, V, A.lnf, C, 0.0f, dwte, C);
    ZRT_CHECK_CUDA(kc::embeddingBackward(dwte, g[1], A.dres, A.inputs(), batch, s_.T, C, cs_));
  }

 private:
  // y = (residual ? residual : 0) + b + x W.
  void linearForward(float* y, const float* x, const float* W, const float* b, const float* residual, int n, int in,
                     int out) {
    ZRT_CHECK_CUDA(kc::fillBias(y, b, residual, n, out, cs_));
    blas_.gemm(false, false, n, out, in, 1.0f, x, in, W, out, 1.0f, y, out);
  }
  // dx = dy W^T.
  void linearInputGrad(float* dx, const float* dy, const float* W, int n, int in, int out) {
    blas_.gemm(false, true, n, in, out, 1.0f, dy, out, W, out, 0.0f, dx, in);
  }
  // dW = x^T dy, db = the column sums of dy; each skipped when null (frozen).
  void linearParamGrads(const ActivationBuffers& A, float* dW, float* db, const float* dy, const float* x, int n,
                        int in, int out) {
    if (dW) blas_.gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 0.0f, dW, out);
    if (db) blas_.columnSums(db, dy, A.ones, n, out);
  }
  // A.dres += the input gradient of the LayerNorm of x; its weight's and bias's gradients.
  void layerNormBackward(const ActivationBuffers& A, float* dw, float* db, const float* dy, const float* x,
                         const float* w, const float* mean, const float* rstd, int n) {
    ZRT_CHECK_CUDA(kc::layerNormBackward(A.dres, A.lnTmp, dy, x, w, mean, rstd, n, s_.C, cs_));
    if (dw) blas_.columnSums(dw, A.lnTmp, A.ones, n, s_.C);
    if (db) blas_.columnSums(db, dy, A.ones, n, s_.C);
  }
  // Target t's adapter: u = x A^T, kept; y += scale u B^T (y null: only u).
  void adapt(LoraTarget t, const BlockActs& a, const std::vector<const float*>& p, const float* x, float* y, int n) {
    const int ia = s_.loraA[static_cast<int>(t)];
    if (ia < 0) return;
    const int in = static_cast<int>(inFeatures(t, s_.C)), out = static_cast<int>(outFeatures(t, s_.C));
    const int r = s_.loraRank;
    float* u = a.loraU[static_cast<int>(t)];
    blas_.gemm(false, true, n, r, in, 1.0f, x, in, p[ia], in, 0.0f, u, r);
    if (y) blas_.gemm(false, true, n, out, r, s_.loraScale, u, r, p[ia + 1], r, 1.0f, y, out);
  }
  // Its backward from dy: du = scale dy B; dB = scale dy^T u; dA = du^T x; dx += du A.
  void adaptBack(const ActivationBuffers& A, LoraTarget t, const BlockActs& a, const std::vector<const float*>& p,
                 const std::vector<float*>& g, const float* dy, const float* x, float* dx, int n) {
    const int ia = s_.loraA[static_cast<int>(t)];
    if (ia < 0) return;
    const int in = static_cast<int>(inFeatures(t, s_.C)), out = static_cast<int>(outFeatures(t, s_.C));
    const int r = s_.loraRank;
    blas_.gemm(false, false, n, r, out, s_.loraScale, dy, out, p[ia + 1], r, 0.0f, A.loraDu, r);
    if (g[ia + 1])
      blas_.gemm(true, false, out, r, n, s_.loraScale, dy, out, a.loraU[static_cast<int>(t)], r, 0.0f, g[ia + 1], r);
    if (g[ia]) blas_.gemm(true, false, r, in, n, 1.0f, A.loraDu, r, x, in, 0.0f, g[ia], in);
    blas_.gemm(false, false, n, in, r, 1.0f, A.loraDu, r, p[ia], in, 1.0f, dx, in);
  }
  // Per sequence, its heads batched: scores = scale Q K^T, the causal softmax over all pairs,
  // out = P V. qkv rows hold q, k, v (heads contiguous, D apart); att holds a T x T per pair.
  void attentionForward(const BlockActs& a, int batch) {
    const int T = s_.T, C = s_.C, H = s_.H, D = C / H, ld = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const long long tt = static_cast<long long>(T) * T;
    for (int b = 0; b < batch; ++b) {
      const float* q = a.qkv + static_cast<std::int64_t>(b) * T * ld;
      blas_.gemmBatched(false, true, T, T, D, scale, q, ld, D, q + C, ld, D, 0.0f, a.att + b * H * tt, T, tt, H);
    }
    ZRT_CHECK_CUDA(kc::causalSoftmax(a.att, static_cast<std::int64_t>(batch) * H, T, cs_));
    for (int b = 0; b < batch; ++b) {
      const float* v = a.qkv + static_cast<std::int64_t>(b) * T * ld + 2 * C;
      blas_.gemmBatched(false, false, T, D, T, 1.0f, a.att + b * H * tt, T, tt, v, ld, D, 0.0f,
                        a.atty + static_cast<std::int64_t>(b) * T * C, C, D, H);
    }
  }
  // From A.datty (d out): dP = dout V^T into A.datt, through the softmax to dS, then dQ = scale
  // dS K, dK = scale dS^T Q and dV = P^T dout into A.dqkv.
  void attentionBackward(const ActivationBuffers& A, const BlockActs& a, int batch) {
    const int T = s_.T, C = s_.C, H = s_.H, D = C / H, ld = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const long long tt = static_cast<long long>(T) * T;
    for (int b = 0; b < batch; ++b) {
      const float* v = a.qkv + static_cast<std::int64_t>(b) * T * ld + 2 * C;
      blas_.gemmBatched(false, true, T, T, D, 1.0f, A.datty + static_cast<std::int64_t>(b) * T * C, C, D, v, ld, D,
                        0.0f, A.datt + b * H * tt, T, tt, H);
    }
    ZRT_CHECK_CUDA(kc::causalSoftmaxBackward(A.datt, a.att, static_cast<std::int64_t>(batch) * H, T, cs_));
    for (int b = 0; b < batch; ++b) {
      const std::int64_t off = static_cast<std::int64_t>(b) * T * ld;
      const float* q = a.qkv + off;
      const float* dS = A.datt + b * H * tt;
      const float* P = a.att + b * H * tt;
      const float* dout = A.datty + static_cast<std::int64_t>(b) * T * C;
      blas_.gemmBatched(false, false, T, D, T, scale, dS, T, tt, q + C, ld, D, 0.0f, A.dqkv + off, ld, D, H);
      blas_.gemmBatched(true, false, T, D, T, scale, dS, T, tt, q, ld, D, 0.0f, A.dqkv + off + C, ld, D, H);
      blas_.gemmBatched(true, false, T, D, T, 1.0f, P, T, tt, dout, C, D, 0.0f, A.dqkv + off + 2 * C, ld, D, H);
    }
  }

  Gpt2LayerShape s_;
  Device& device_;
  Stream& stream_;
  cudaStream_t cs_;
  kc::CublasGemm blas_;
};

}  // namespace

std::unique_ptr<GpuLayers> makeCudaLayers(const Gpt2LayerShape& shape, Device& device, Stream& stream) {
  return std::make_unique<CudaLayers>(shape, device, stream);
}

}  // namespace zrt::trainer
