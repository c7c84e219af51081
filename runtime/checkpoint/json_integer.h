// Integers read from the JSON of checkpoint files (manifest.json, safetensors headers) exactly.
// nlohmann's get<int>() converts whatever number it finds: a float (1e300 into an int is
// undefined behaviour), a negative into an unsigned type, or a too-large value truncated, so a
// corrupt "rank": 4294967297 would read as rank 1. These accept only a JSON integer inside the
// target type's range; the caller names the file and key in its error.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrt::checkpoint {

template <class T>
std::optional<T> exactInteger(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {  // stored signed: negative, or built from a signed C++ value
    const std::int64_t s = v.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (s < 0) return std::nullopt;
      if (static_cast<std::uint64_t>(s) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    } else {
      if (s < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          s > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
        return std::nullopt;
    }
    return static_cast<T>(s);
  }
  return std::nullopt;  // a float, a string, anything else
}

// An array of such integers, or nullopt when `v` is not an array or one element does not fit.
template <class T>
std::optional<std::vector<T>> exactIntegers(const nlohmann::json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<T> out;
  out.reserve(v.size());
  for (const nlohmann::json& e : v) {
    const std::optional<T> x = exactInteger<T>(e);
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

}  // namespace zrt::checkpoint
