#include "core/element_arithmetic.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace zrt {
namespace {

// F16C through cpuid (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool haveF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool haveAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && haveF16c();
  return yes;
}

template <DType T>
inline float loadOne(const void* p, std::size_t i) {
  if constexpr (T == DType::F32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (T == DType::F16) {
    return halfToFloat(static_cast<const std::uint16_t*>(p)[i]);
  } else {
    return bf16ToFloat(static_cast<const std::uint16_t*>(p)[i]);
  }
}

template <DType T>
inline void storeOne(void* p, std::size_t i, float v) {
  if constexpr (T == DType::F32) {
    static_cast<float*>(p)[i] = v;
  } else if constexpr (T == DType::F16) {
    static_cast<std::uint16_t*>(p)[i] = floatToHalf(v);
  } else {
    static_cast<std::uint16_t*>(p)[i] = floatToBf16(v);
  }
}

template <DType T>
__attribute__((target("avx2,f16c,fma"))) inline __m256 load8(const void* p, std::size_t i) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
    if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

template <DType T>
__attribute__((target("avx2,f16c,fma"))) inline void store8(void* p, std::size_t i, __m256 v) {
  if constexpr (T == DType::F32) {
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
  } else {
    __m128i out;
    if constexpr (T == DType::F16) {
      out = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // Round to nearest even on the bit pattern; NaNs keep their top bits and stay quiet.
      const __m256i u = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
      const __m256i packed = _mm256_packus_epi32(r, r);  // per lane: r0..3 r0..3 | r4..7 r4..7
      out = _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(p) + i), out);
  }
}

template <DType T>
void sumScalar(void* dst, const void* const* srcs, int n, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    float acc = loadOne<T>(srcs[0], i);
    for (int k = 1; k < n; ++k) acc += loadOne<T>(srcs[k], i);
    storeOne<T>(dst, i, acc);
  }
}

template <DType T>
__attribute__((target("avx2,f16c,fma"))) std::size_t sumAvx2(void* dst, const void* const* srcs,
                                                              int n, std::size_t count) {
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256 a = load8<T>(srcs[0], i);
    __m256 b = load8<T>(srcs[0], i + 8);
    for (int k = 1; k < n; ++k) {
      a = _mm256_add_ps(a, load8<T>(srcs[k], i));
      b = _mm256_add_ps(b, load8<T>(srcs[k], i + 8));
    }
    store8<T>(dst, i, a);
    store8<T>(dst, i + 8, b);
  }
  return i;
}

template <DType T>
void sumTyped(void* dst, const void* const* srcs, int n, std::size_t count) {
  std::size_t done = haveAvx2() ? sumAvx2<T>(dst, srcs, n, count) : 0;
  sumScalar<T>(dst, srcs, n, done, count);
}

template <DType T>
__attribute__((target("avx2,f16c,fma"))) std::size_t addDivAvx2(void* dst, const void* src,
                                                                 std::size_t count, float d,
                                                                 bool add) {
  const __m256 dv = _mm256_set1_ps(d);
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 q = _mm256_div_ps(load8<T>(src, i), dv);
    if (add) q = _mm256_add_ps(load8<T>(dst, i), q);
    store8<T>(dst, i, q);
  }
  return i;
}

template <DType T>
void addDivTyped(void* dst, const void* src, std::size_t count, float d, bool add) {
  std::size_t i = haveAvx2() ? addDivAvx2<T>(dst, src, count, d, add) : 0;
  for (; i < count; ++i) {
    float q = loadOne<T>(src, i) / d;
    if (add) q = loadOne<T>(dst, i) + q;
    storeOne<T>(dst, i, q);
  }
}

}  // namespace

void sumInto(DType dtype, void* dst, const void* const* srcs, int nsrc, std::size_t count) {
  if (count == 0 || nsrc <= 0) return;
  switch (dtype) {
    case DType::F32: return sumTyped<DType::F32>(dst, srcs, nsrc, count);
    case DType::F16: return sumTyped<DType::F16>(dst, srcs, nsrc, count);
    case DType::BF16: return sumTyped<DType::BF16>(dst, srcs, nsrc, count);
  }
}

void sumPair(DType dtype, const void* in, void* inout, std::size_t count) {
  const void* srcs[2] = {in, inout};
  sumInto(dtype, inout, srcs, 2, count);
}

void divideBy(DType dtype, void* buf, std::size_t count, float divisor) {
  if (divisor == 1.0f || count == 0) return;
  switch (dtype) {
    case DType::F32: return addDivTyped<DType::F32>(buf, buf, count, divisor, false);
    case DType::F16: return addDivTyped<DType::F16>(buf, buf, count, divisor, false);
    case DType::BF16: return addDivTyped<DType::BF16>(buf, buf, count, divisor, false);
  }
}

void addDivided(DType dtype, void* dst, const void* src, std::size_t count, float divisor) {
  if (count == 0) return;
  switch (dtype) {
    case DType::F32: return addDivTyped<DType::F32>(dst, src, count, divisor, true);
    case DType::F16: return addDivTyped<DType::F16>(dst, src, count, divisor, true);
    case DType::BF16: return addDivTyped<DType::BF16>(dst, src, count, divisor, true);
  }
}

float loadElement(DType dtype, const void* buf, std::size_t i) {
  switch (dtype) {
    case DType::F32: return loadOne<DType::F32>(buf, i);
    case DType::F16: return loadOne<DType::F16>(buf, i);
    case DType::BF16: return loadOne<DType::BF16>(buf, i);
  }
  return 0;
}

void storeElement(DType dtype, void* buf, std::size_t i, float value) {
  switch (dtype) {
    case DType::F32: return storeOne<DType::F32>(buf, i, value);
    case DType::F16: return storeOne<DType::F16>(buf, i, value);
    case DType::BF16: return storeOne<DType::BF16>(buf, i, value);
  }
}

void widenInto(DType t, const void* x, float* acc, std::size_t count, bool add) {
  const auto* h = static_cast<const std::uint16_t*>(x);
  const auto* f = static_cast<const float*>(x);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = t == DType::F32 ? f[i] : t == DType::BF16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
    acc[i] = add ? acc[i] + v : v;
  }
}

}  // namespace zrt
