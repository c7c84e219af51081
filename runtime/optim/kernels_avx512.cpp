// The AVX-512 path: 16 floats per step; the tail of a range is one masked step (AVX-512 masked
// loads and stores touch only the lanes in the mask, so nothing past the range is read or
// written). Built with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c and -ffp-contract=off;
// called only where resolveIsa() found AVX-512 F, BW and VL.
// fp16 conversions use the hardware converters (round to nearest even, exact widening); bf16
// rounding is done with integer operations that mirror core/dtype.h's floatToBf16 rather
// than VCVTNEPS2BF16, which flushes subnormals to zero and would differ from the scalar path.
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

struct VAvx512 {
  using F = __m512;
  using Mask = __mmask16;
  static constexpr std::size_t kWidth = 16;
  static constexpr bool kMaskedTail = true;
  static Mask full() { return static_cast<Mask>(0xffff); }
  static Mask tail(std::size_t n) { return static_cast<Mask>((1u << n) - 1u); }

  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p, Mask k) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, F x, Mask k) { _mm512_mask_storeu_ps(p, k, x); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }

  static __m256i load16x16(const void* base, std::size_t i, Mask k) {
    return _mm256_maskz_loadu_epi16(k, static_cast<const std::uint16_t*>(base) + i);
  }
  static void store16x16(void* base, std::size_t i, __m256i x, Mask k) {
    _mm256_mask_storeu_epi16(static_cast<std::uint16_t*>(base) + i, k, x);
  }

  template <DType G>
  static F loadGrad(const void* base, std::size_t i, Mask k) {
    if constexpr (G == DType::F32) {
      return _mm512_maskz_loadu_ps(k, static_cast<const float*>(base) + i);
    } else if constexpr (G == DType::F16) {
      return _mm512_cvtph_ps(load16x16(base, i, k));
    } else {
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(load16x16(base, i, k)), 16));
    }
  }

  // floatToBf16 in 16 lanes: NaN -> (u >> 16) | 0x40, else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
  static __m256i toBf16(F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    const __mmask16 isNan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, isNan, quiet));
  }

  template <CopyKind C>
  static void storeCopy(void* base, std::size_t i, F x, Mask k) {
    if constexpr (C == CopyKind::F32) {
      _mm512_mask_storeu_ps(static_cast<float*>(base) + i, k, x);
    } else if constexpr (C == CopyKind::F16) {
      store16x16(base, i, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), k);
    } else if constexpr (C == CopyKind::BF16) {
      store16x16(base, i, toBf16(x), k);
    }
  }

  static void touch(F& x) { asm volatile("" : "+v"(x)); }

  template <DType G>
  static void touchGrad(const void* base, std::size_t i, Mask k) {
    if constexpr (G == DType::F32) {
      F g = _mm512_maskz_loadu_ps(k, static_cast<const float*>(base) + i);
      touch(g);
    } else {
      __m256i g = load16x16(base, i, k);
      asm volatile("" : "+v"(g));
    }
  }

  template <CopyKind C>
  static void storeCopyRaw(void* base, std::size_t i, F x, Mask k) {
    if constexpr (C == CopyKind::F32) {
      _mm512_mask_storeu_ps(static_cast<float*>(base) + i, k, x);
    } else {
      store16x16(base, i, _mm512_castsi512_si256(_mm512_castps_si512(x)), k);  // no arithmetic
    }
  }
};

}  // namespace

void adamAvx512(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end) {
  adamDispatch<VAvx512>(c, a, begin, end);
}
void sgdAvx512(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end) {
  sgdDispatch<VAvx512>(c, a, begin, end);
}
void rooflineAvx512(const AdamArrays& a, std::size_t begin, std::size_t end) {
  rooflineDispatch<VAvx512>(a, begin, end);
}
void toFloatAvx512(DType from, const void* in, float* out, std::size_t n) {
  toFloatDispatch<VAvx512>(from, in, out, n);
}
void fromFloatAvx512(DType to, const float* in, void* out, std::size_t n) {
  fromFloatDispatch<VAvx512>(to, in, out, n);
}

}  // namespace zrt::optim::detail
