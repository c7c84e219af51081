// Internal: argument checks shared by the optimizer entry points; each throws InvalidArgument
// whose message names the call, the field and the value. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace zrt::optim::detail {

void checkHyper(std::string_view optimizer, std::string_view field, double value, bool ok,
                std::string_view expected);
void checkRange(std::string_view call, std::size_t offset, std::size_t count, std::size_t size);
void checkArray(std::string_view call, std::string_view name, const void* ptr);
void checkThreads(std::string_view call, int threads);

}  // namespace zrt::optim::detail
