// The scalar path: one element at a time, for processors without AVX2 and for the tails of the
// AVX2 path. Built with -ffp-contract=off (runtime/optim/CMakeLists.txt) so the compiler never
// fuses a multiply and an add that the kernels keep separate; fma is written out where the
// operation order (kernel_args.h) has one. Conversions are core/dtype.h's exact ones.
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "runtime/optim/detail/kernel_body.h"
#include "runtime/optim/detail/kernels.h"

namespace zrt::optim::detail {
namespace {

struct VScalar {
  using F = float;
  struct Mask {};
  static constexpr std::size_t kWidth = 1;
  static constexpr bool kMaskedTail = false;
  static Mask full() { return {}; }
  static Mask tail(std::size_t) { return {}; }

  static F set1(float x) { return x; }
  static F load(const float* p, Mask) { return *p; }
  static void store(float* p, F x, Mask) { *p = x; }
  static F mul(F a, F b) { return a * b; }
  static F add(F a, F b) { return a + b; }
  static F div(F a, F b) { return a / b; }
  static F sqrt(F a) { return std::sqrt(a); }
  static F fma(F a, F b, F c) { return std::fma(a, b, c); }

  template <DType G>
  static F loadGrad(const void* base, std::size_t i, Mask) {
    if constexpr (G == DType::F32) {
      return static_cast<const float*>(base)[i];
    } else if constexpr (G == DType::F16) {
      return halfToFloat(static_cast<const std::uint16_t*>(base)[i]);
    } else {
      return bf16ToFloat(static_cast<const std::uint16_t*>(base)[i]);
    }
  }

  template <CopyKind C>
  static void storeCopy(void* base, std::size_t i, F x, Mask) {
    if constexpr (C == CopyKind::F32) {
      static_cast<float*>(base)[i] = x;
    } else if constexpr (C == CopyKind::F16) {
      static_cast<std::uint16_t*>(base)[i] = floatToHalf(x);
    } else if constexpr (C == CopyKind::BF16) {
      static_cast<std::uint16_t*>(base)[i] = floatToBf16(x);
    }
  }

#if defined(__x86_64__) || defined(__i386__)
  static void touch(F& x) { asm volatile("" : "+x"(x)); }
#else
  static void touch(F& x) { asm volatile("" : "+g"(x)); }
#endif

  template <DType G>
  static void touchGrad(const void* base, std::size_t i, Mask) {
    if constexpr (G == DType::F32) {
      float g = static_cast<const float*>(base)[i];
      touch(g);
    } else {
      std::uint16_t g = static_cast<const std::uint16_t*>(base)[i];
      asm volatile("" : "+r"(g));
    }
  }

  template <CopyKind C>
  static void storeCopyRaw(void* base, std::size_t i, F x, Mask) {
    if constexpr (C == CopyKind::F32) {
      static_cast<float*>(base)[i] = x;
    } else {
      // The low half of the bits: a 2-byte store with no conversion arithmetic.
      static_cast<std::uint16_t*>(base)[i] =
          static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x));
    }
  }
};

}  // namespace

void adamScalar(const AdamCoeffs& c, const AdamArrays& a, std::size_t begin, std::size_t end) {
  adamDispatch<VScalar>(c, a, begin, end);
}
void sgdScalar(const SgdCoeffs& c, const SgdArrays& a, std::size_t begin, std::size_t end) {
  sgdDispatch<VScalar>(c, a, begin, end);
}
void rooflineScalar(const AdamArrays& a, std::size_t begin, std::size_t end) {
  rooflineDispatch<VScalar>(a, begin, end);
}
void toFloatScalar(DType from, const void* in, float* out, std::size_t n) {
  toFloatDispatch<VScalar>(from, in, out, n);
}
void fromFloatScalar(DType to, const float* in, void* out, std::size_t n) {
  fromFloatDispatch<VScalar>(to, in, out, n);
}

}  // namespace zrt::optim::detail
