#include "runtime/optim/detail/step_checks.h"

#include "core/error.h"

namespace zrt::optim::detail {

void checkHyper(std::string_view optimizer, std::string_view field, double value, bool ok,
                std::string_view expected) {
  if (!ok) {
    ZRT_THROW(InvalidArgument, optimizer, ": ", field, " must be ", expected, ", got ", value);
  }
}

void checkRange(std::string_view call, std::size_t offset, std::size_t count, std::size_t size) {
  if (offset > size || count > size - offset) {
    ZRT_THROW(InvalidArgument, call, ": range [offset ", offset, ", offset + count ", offset, " + ",
              count, ") runs past the arrays' size ", size);
  }
}

void checkArray(std::string_view call, std::string_view name, const void* ptr) {
  if (ptr == nullptr) ZRT_THROW(InvalidArgument, call, ": array '", name, "' is null");
}

void checkThreads(std::string_view call, int threads) {
  if (threads < 0) {
    ZRT_THROW(InvalidArgument, call, ": threads must be >= 0 (0: OpenMP's default), got ", threads);
  }
}

}  // namespace zrt::optim::detail
