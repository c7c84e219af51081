// TensorRef: a view of one parameter or gradient the Engine hands its caller, with typed access
// so a caller need not cast `void*` by the dtype itself: as<T>() is a span of the elements in
// their own type (float, Half or BFloat16; a mismatch is refused, naming the tensor), and
// load()/store() read and write one element as float in any dtype.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace zrt {

template <class T>
constexpr DType dtypeOf() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>,
                "a tensor's elements are float, Half or BFloat16");
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, Half>) return DType::F16;
  else return DType::BF16;
}

struct TensorRef {
  const std::string* name = nullptr;
  const std::vector<std::int64_t>* shape = nullptr;
  void* data = nullptr;  // null for the gradient of a frozen parameter
  DType dtype = DType::F32;
  std::uint64_t numel = 0;

  // The elements as T, which must be this tensor's dtype (T may be const).
  template <class T>
  std::span<T> as() const {
    if (dtypeOf<std::remove_const_t<T>>() != dtype)
      ZRT_THROW(InvalidArgument, "tensor '", name ? *name : std::string("?"), "' holds ", nameOf(dtype),
                ", not ", nameOf(dtypeOf<std::remove_const_t<T>>()));
    if (!data && numel > 0)
      ZRT_THROW(InvalidArgument, "tensor '", name ? *name : std::string("?"),
                "' has no memory (the gradient of a frozen parameter)");
    return {static_cast<T*>(data), static_cast<std::size_t>(numel)};
  }
  // Element i as float, whatever the dtype; store() rounds to the dtype (to nearest, ties even).
  float load(std::uint64_t i) const {
    switch (dtype) {
      case DType::F32: return static_cast<const float*>(data)[i];
      case DType::F16: return halfToFloat(static_cast<const std::uint16_t*>(data)[i]);
      case DType::BF16: break;
    }
    return bf16ToFloat(static_cast<const std::uint16_t*>(data)[i]);
  }
  void store(std::uint64_t i, float v) const {
    switch (dtype) {
      case DType::F32: static_cast<float*>(data)[i] = v; return;
      case DType::F16: static_cast<std::uint16_t*>(data)[i] = floatToHalf(v); return;
      case DType::BF16: break;
    }
    static_cast<std::uint16_t*>(data)[i] = floatToBf16(v);
  }
};

}  // namespace zrt
