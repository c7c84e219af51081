// The AVX2 path: 8 floats per step with AVX2, FMA and F16C; tails shorter than a vector go to
// the scalar path, which runs the same operations. Built with -mavx2 -mfma -mf16c and
// -ffp-contract=off; called only where resolveIsa() found those features.
// fp16 conversions use F16C (round to nearest even, exact widening); bf16 rounding is done with
// integer operations that mirror core/dtype.h's floatToBf16 (tests hold every path to it).
// GCC 12 reports its own intrinsics' deliberately undefined vectors (_mm*_undefined_*) as
// "may be used uninitialized" (GCC bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "core/dtype.h"
#include "runtime/optim/detail/kernel_body.h"
#include "runtime/optim/detail/kernels.h"

namespace zrt::optim::detail {
namespace {

struct VAvx2 {
  using F = __m256;
  struct Mask {};
  static constexpr std::size_t kWidth = 8;
  static constexpr bool kMaskedTail = false;
  static Mask full() { return {}; }
  static Mask tail(std::size_t) { return {}; }

  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p, Mask) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x, Mask) { _mm256_storeu_ps(p, x); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }

  static __m128i load8x16(const void* base, std::size_t i) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(base) + i));
  }
  static void store8x16(void* base, std::size_t i, __m128i x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(base) + i), x);
  }

  template <DType G>
  static F loadGrad(const void* base, std::size_t i, Mask) {
    if constexpr (G == DType::F32) {
      return _mm256_loadu_ps(static_cast<const float*>(base) + i);
    } else if constexpr (G == DType::F16) {
      return _mm256_cvtph_ps(load8x16(base, i));
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8x16(base, i)), 16));
    }
  }

  // floatToBf16 in 8 lanes: NaN -> (u >> 16) | 0x40, else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
  static __m128i toBf16(F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i isNan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, isNan);
    // Every lane is below 0x10000, so the unsigned-saturating pack is a plain narrowing.
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }

  template <CopyKind C>
  static void storeCopy(void* base, std::size_t i, F x, Mask) {
    if constexpr (C == CopyKind::F32) {
      _mm256_storeu_ps(static_cast<float*>(base) + i, x);
    } else if constexpr (C == CopyKind::F16) {
      store8x16(base, i, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if constexpr (C == CopyKind::BF16) {
      store8x16(base, i, toBf16(x));
    }
  }

  static void touch(F& x) { asm volatile("" : "+x"(x)); }

  template <DType G>
  static void touchGrad(const void* base, std::size_t i, Mask) {
    if constexpr (G == DType::F32) {
      F g = _mm256_loadu_ps(static_cast<const float*>(base) + i);
      touch(g);
    } else {
      __m128i g = load8x16(base, i);
      asm volatile("" : "+x"(g));
    }
  }

  template <CopyKind C>
  static void storeCopyRaw(void* base, std::size_t i, F x, Mask) {
    if constexpr (C == CopyKind::F32) {
      _mm256_storeu_ps(static_cast<float*>(base) + i, x);
    } else {
      store8x16(base, i,
                _mm256_castsi256_si128(_mm256_castps_si256(x)));  // 16 bytes, no arithmetic
    }
  }
};

}  // namespace

void adamAvx2(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end) {
  adamDispatch<VAvx2>(c, a, begin, end);
}
void sgdAvx2(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end) {
  sgdDispatch<VAvx2>(c, a, begin, end);
}
void rooflineAvx2(const AdamArrays& a, std::size_t begin, std::size_t end) {
  rooflineDispatch<VAvx2>(a, begin, end);
}
void toFloatAvx2(DType from, const void* in, float* out, std::size_t n) {
  toFloatDispatch<VAvx2>(from, in, out, n);
}
void fromFloatAvx2(DType to, const float* in, void* out, std::size_t n) {
  fromFloatDispatch<VAvx2>(to, in, out, n);
}

}  // namespace zrt::optim::detail
