#include "runtime/optim/convert.h"

#include "runtime/optim/detail/kernels.h"

namespace zrt::optim {

void convertToFloat(DType from, const void* in, float* out, std::size_t n, Isa isa) {
  if (n == 0) return;
  detail::kernelsFor(resolveIsa(isa)).toFloat(from, in, out, n);
}

void convertFromFloat(DType to, const float* in, void* out, std::size_t n, Isa isa) {
  if (n == 0) return;
  detail::kernelsFor(resolveIsa(isa)).fromFloat(to, in, out, n);
}

}  // namespace zrt::optim
