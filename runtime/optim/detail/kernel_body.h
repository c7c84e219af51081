// Internal: the optimizer kernels written once over a vector type V, so every CPU path runs the
// very same operations in the same order (kernel_args.h states the order); only V's width and
// instructions differ. Included by kernels_scalar.cpp, kernels_avx2.cpp and kernels_avx512.cpp,
// each with its own V defined in an anonymous namespace: every instantiation then has internal
// linkage, so code compiled with AVX-512 flags can never be picked by the linker for another
// path. Keep this header free of non-template inline functions for the same reason.
//
// V provides: F (a vector of floats), Mask (the lanes a masked tail touches; empty on paths
// without masked memory operations), kWidth, kMaskedTail, full(), tail(n), set1, load, store,
// mul, add, div, sqrt, fma, loadGrad<DType>, storeCopy<CopyKind>, and for the roofline kernel
// touch(F&), touchGrad<DType> and storeCopyRaw<CopyKind> (memory traffic with no arithmetic).
// Thread-safe for disjoint ranges.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "runtime/optim/detail/kernels.h"
#include "runtime/optim/kernel_args.h"

namespace zrt::optim::detail {

template <class V>
struct AdamConsts {
  using F = typename V::F;
  explicit AdamConsts(const AdamCoeffs& c)
      : gradScale(V::set1(c.gradScale)),
        weightDecay(V::set1(c.weightDecay)),
        decay(V::set1(c.decay)),
        beta1(V::set1(c.beta1)),
        oneMinusBeta1(V::set1(c.oneMinusBeta1)),
        beta2(V::set1(c.beta2)),
        oneMinusBeta2(V::set1(c.oneMinusBeta2)),
        biasCorrection2Sqrt(V::set1(c.biasCorrection2Sqrt)),
        eps(V::set1(c.eps)),
        negStepSize(V::set1(c.negStepSize)) {}
  F gradScale, weightDecay, decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, biasCorrection2Sqrt,
      eps, negStepSize;
};

template <class V, DType G, CopyKind C, AdamMode M>
inline void adamLanes(const AdamConsts<V>& k, const AdamArrays& a, std::size_t i,
                      typename V::Mask mask) {
  using F = typename V::F;
  F g = V::mul(V::template loadGrad<G>(a.grad, i, mask), k.gradScale);
  F p = V::load(a.param + i, mask);
  F m = V::load(a.expAvg + i, mask);
  F v = V::load(a.expAvgSq + i, mask);
  if constexpr (M == AdamMode::L2) g = V::fma(p, k.weightDecay, g);
  if constexpr (M == AdamMode::Decoupled) p = V::mul(p, k.decay);
  m = V::fma(g, k.oneMinusBeta1, V::mul(m, k.beta1));
  v = V::fma(V::mul(k.oneMinusBeta2, g), g, V::mul(v, k.beta2));
  const F denom = V::add(V::div(V::sqrt(v), k.biasCorrection2Sqrt), k.eps);
  p = V::add(p, V::div(V::mul(k.negStepSize, m), denom));
  V::store(a.param + i, p, mask);
  V::store(a.expAvg + i, m, mask);
  V::store(a.expAvgSq + i, v, mask);
  if constexpr (C != CopyKind::None) V::template storeCopy<C>(a.copy, i, p, mask);
}

template <class V, DType G, CopyKind C, AdamMode M>
void adamRange(const AdamCoeffs& c, const AdamArrays& arrays, std::size_t begin,
               std::size_t end) {
  const AdamConsts<V> k(c);
  const AdamArrays a = arrays;  // a local copy: the stores cannot alias its pointers
  std::size_t i = begin;
  for (; i + V::kWidth <= end; i += V::kWidth) adamLanes<V, G, C, M>(k, a, i, V::full());
  if (i < end) {
    if constexpr (V::kMaskedTail) {
      adamLanes<V, G, C, M>(k, a, i, V::tail(end - i));
    } else {
      adamScalar(c, a, i, end);  // the same operations, one element at a time
    }
  }
}

template <class V, DType G, CopyKind C>
void adamByMode(const AdamCoeffs& c, const AdamArrays& a, std::size_t b, std::size_t e) {
  switch (c.mode) {
    case AdamMode::Plain:
      return adamRange<V, G, C, AdamMode::Plain>(c, a, b, e);
    case AdamMode::L2:
      return adamRange<V, G, C, AdamMode::L2>(c, a, b, e);
    case AdamMode::Decoupled:
      return adamRange<V, G, C, AdamMode::Decoupled>(c, a, b, e);
  }
}

template <class V, DType G>
void adamByCopy(const AdamCoeffs& c, const AdamArrays& a, std::size_t b, std::size_t e) {
  switch (a.copyKind) {
    case CopyKind::None:
      return adamByMode<V, G, CopyKind::None>(c, a, b, e);
    case CopyKind::F32:
      return adamByMode<V, G, CopyKind::F32>(c, a, b, e);
    case CopyKind::F16:
      return adamByMode<V, G, CopyKind::F16>(c, a, b, e);
    case CopyKind::BF16:
      return adamByMode<V, G, CopyKind::BF16>(c, a, b, e);
  }
}

template <class V>
void adamDispatch(const AdamCoeffs& c, const AdamArrays& a, std::size_t b, std::size_t e) {
  switch (a.gradType) {
    case DType::F32:
      return adamByCopy<V, DType::F32>(c, a, b, e);
    case DType::F16:
      return adamByCopy<V, DType::F16>(c, a, b, e);
    case DType::BF16:
      return adamByCopy<V, DType::BF16>(c, a, b, e);
  }
}

// SGD: the coefficient flags are the same for every element, so plain branches on them cost
// nothing measurable (SGD is not on the bandwidth-critical path the way Adam is).
template <class V>
struct SgdConsts {
  using F = typename V::F;
  explicit SgdConsts(const SgdCoeffs& c)
      : gradScale(V::set1(c.gradScale)),
        weightDecay(V::set1(c.weightDecay)),
        momentum(V::set1(c.momentum)),
        oneMinusDampening(V::set1(c.oneMinusDampening)),
        negLr(V::set1(c.negLr)),
        hasWeightDecay(c.hasWeightDecay != 0),
        momentumMode(c.momentumMode),
        nesterov(c.nesterov != 0) {}
  F gradScale, weightDecay, momentum, oneMinusDampening, negLr;
  bool hasWeightDecay;
  SgdMomentum momentumMode;
  bool nesterov;
};

template <class V, DType G, CopyKind C>
inline void sgdLanes(const SgdConsts<V>& k, const SgdArrays& a, std::size_t i,
                     typename V::Mask mask) {
  using F = typename V::F;
  F g = V::mul(V::template loadGrad<G>(a.grad, i, mask), k.gradScale);
  F p = V::load(a.param + i, mask);
  if (k.hasWeightDecay) g = V::fma(p, k.weightDecay, g);
  if (k.momentumMode != SgdMomentum::None) {
    F buf = g;
    if (k.momentumMode == SgdMomentum::Update) {
      buf = V::fma(g, k.oneMinusDampening, V::mul(V::load(a.momentum + i, mask), k.momentum));
    }
    V::store(a.momentum + i, buf, mask);
    g = k.nesterov ? V::fma(buf, k.momentum, g) : buf;
  }
  p = V::fma(g, k.negLr, p);
  V::store(a.param + i, p, mask);
  if constexpr (C != CopyKind::None) V::template storeCopy<C>(a.copy, i, p, mask);
}

template <class V, DType G, CopyKind C>
void sgdRange(const SgdCoeffs& c, const SgdArrays& arrays, std::size_t begin, std::size_t end) {
  const SgdConsts<V> k(c);
  const SgdArrays a = arrays;
  std::size_t i = begin;
  for (; i + V::kWidth <= end; i += V::kWidth) sgdLanes<V, G, C>(k, a, i, V::full());
  if (i < end) {
    if constexpr (V::kMaskedTail) {
      sgdLanes<V, G, C>(k, a, i, V::tail(end - i));
    } else {
      sgdScalar(c, a, i, end);
    }
  }
}

template <class V, DType G>
void sgdByCopy(const SgdCoeffs& c, const SgdArrays& a, std::size_t b, std::size_t e) {
  switch (a.copyKind) {
    case CopyKind::None:
      return sgdRange<V, G, CopyKind::None>(c, a, b, e);
    case CopyKind::F32:
      return sgdRange<V, G, CopyKind::F32>(c, a, b, e);
    case CopyKind::F16:
      return sgdRange<V, G, CopyKind::F16>(c, a, b, e);
    case CopyKind::BF16:
      return sgdRange<V, G, CopyKind::BF16>(c, a, b, e);
  }
}

template <class V>
void sgdDispatch(const SgdCoeffs& c, const SgdArrays& a, std::size_t b, std::size_t e) {
  switch (a.gradType) {
    case DType::F32:
      return sgdByCopy<V, DType::F32>(c, a, b, e);
    case DType::F16:
      return sgdByCopy<V, DType::F16>(c, a, b, e);
    case DType::BF16:
      return sgdByCopy<V, DType::BF16>(c, a, b, e);
  }
}

// The roofline: the loads and stores of adamLanes, same arrays, same widths, same in-place
// pattern, and nothing else. touch() is an empty asm statement that makes the compiler treat
// each loaded value as changed, so no load or store can be dropped or merged, and it costs no
// instruction.
template <class V, DType G, CopyKind C>
inline void rooflineLanes(const AdamArrays& a, std::size_t i, typename V::Mask mask) {
  using F = typename V::F;
  V::template touchGrad<G>(a.grad, i, mask);
  F p = V::load(a.param + i, mask);
  F m = V::load(a.expAvg + i, mask);
  F v = V::load(a.expAvgSq + i, mask);
  V::touch(p);
  V::touch(m);
  V::touch(v);
  V::store(a.param + i, p, mask);
  V::store(a.expAvg + i, m, mask);
  V::store(a.expAvgSq + i, v, mask);
  if constexpr (C != CopyKind::None) V::template storeCopyRaw<C>(a.copy, i, p, mask);
}

template <class V, DType G, CopyKind C>
void rooflineRange(const AdamArrays& arrays, std::size_t begin, std::size_t end) {
  const AdamArrays a = arrays;
  std::size_t i = begin;
  for (; i + V::kWidth <= end; i += V::kWidth) rooflineLanes<V, G, C>(a, i, V::full());
  if (i < end) {
    if constexpr (V::kMaskedTail) {
      rooflineLanes<V, G, C>(a, i, V::tail(end - i));
    } else {
      rooflineScalar(a, i, end);
    }
  }
}

template <class V, DType G>
void rooflineByCopy(const AdamArrays& a, std::size_t b, std::size_t e) {
  switch (a.copyKind) {
    case CopyKind::None:
      return rooflineRange<V, G, CopyKind::None>(a, b, e);
    case CopyKind::F32:
      return rooflineRange<V, G, CopyKind::F32>(a, b, e);
    case CopyKind::F16:
      return rooflineRange<V, G, CopyKind::F16>(a, b, e);
    case CopyKind::BF16:
      return rooflineRange<V, G, CopyKind::BF16>(a, b, e);
  }
}

template <class V>
void rooflineDispatch(const AdamArrays& a, std::size_t b, std::size_t e) {
  switch (a.gradType) {
    case DType::F32:
      return rooflineByCopy<V, DType::F32>(a, b, e);
    case DType::F16:
      return rooflineByCopy<V, DType::F16>(a, b, e);
    case DType::BF16:
      return rooflineByCopy<V, DType::BF16>(a, b, e);
  }
}

// Bulk conversions through the same loadGrad/storeCopy the kernels use, so testing these tests
// the kernels' conversions.
template <class V, DType G>
void toFloatRange(const void* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V::store(out + i, V::template loadGrad<G>(in, i, V::full()), V::full());
  }
  if (i < n) {
    if constexpr (V::kMaskedTail) {
      const auto mask = V::tail(n - i);
      V::store(out + i, V::template loadGrad<G>(in, i, mask), mask);
    } else {
      constexpr std::size_t elem = dtypeSize(G);  // constant: no out-of-line copy in this TU
      toFloatScalar(G, static_cast<const char*>(in) + i * elem, out + i, n - i);
    }
  }
}

template <class V>
void toFloatDispatch(DType from, const void* in, float* out, std::size_t n) {
  switch (from) {
    case DType::F32:
      return toFloatRange<V, DType::F32>(in, out, n);
    case DType::F16:
      return toFloatRange<V, DType::F16>(in, out, n);
    case DType::BF16:
      return toFloatRange<V, DType::BF16>(in, out, n);
  }
}

template <class V, CopyKind C>
void fromFloatRange(const float* in, void* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V::template storeCopy<C>(out, i, V::load(in + i, V::full()), V::full());
  }
  if (i < n) {
    if constexpr (V::kMaskedTail) {
      const auto mask = V::tail(n - i);
      V::template storeCopy<C>(out, i, V::load(in + i, mask), mask);
    } else {
      constexpr DType to = static_cast<DType>(static_cast<int>(C));
      constexpr std::size_t elem = dtypeSize(to);
      fromFloatScalar(to, in + i, static_cast<char*>(out) + i * elem, n - i);
    }
  }
}

template <class V>
void fromFloatDispatch(DType to, const float* in, void* out, std::size_t n) {
  switch (to) {
    case DType::F32:
      return fromFloatRange<V, CopyKind::F32>(in, out, n);
    case DType::F16:
      return fromFloatRange<V, CopyKind::F16>(in, out, n);
    case DType::BF16:
      return fromFloatRange<V, CopyKind::BF16>(in, out, n);
  }
}

}  // namespace zrt::optim::detail
