#include "core/dtype.h"

#include <string>

#include "core/error.h"

namespace zrt {

std::string_view nameOf(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

DType parseDType(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32" || name == "float") return DType::F32;
  if (name == "fp16" || name == "float16" || name == "f16" || name == "half") return DType::F16;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  ZRT_THROW(InvalidArgument, "unknown dtype '", name, "': expected fp32, fp16 or bf16");
}

}  // namespace zrt
