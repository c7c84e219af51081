#include "runtime/optim/detail/kernels.h"

#include "core/error.h"

namespace zrt::optim::detail {

const KernelTable& kernelsFor(Isa isa) {
  static const KernelTable scalar{adamScalar, sgdScalar, rooflineScalar, toFloatScalar,
                                  fromFloatScalar};
#if defined(__x86_64__)
  static const KernelTable avx2{adamAvx2, sgdAvx2, rooflineAvx2, toFloatAvx2, fromFloatAvx2};
  static const KernelTable avx512{adamAvx512, sgdAvx512, rooflineAvx512, toFloatAvx512,
                                  fromFloatAvx512};
#endif
  switch (isa) {
    case Isa::Scalar:
      return scalar;
#if defined(__x86_64__)
    case Isa::Avx2:
      return avx2;
    case Isa::Avx512:
      return avx512;
#else
    case Isa::Avx2:
    case Isa::Avx512:
      break;
#endif
    case Isa::Auto:
      break;
  }
  ZRT_THROW(Error, "optimizer kernels: no kernels for path ", nameOf(isa),
            " (resolveIsa() must run first)");
}

}  // namespace zrt::optim::detail
