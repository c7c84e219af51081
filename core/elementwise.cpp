#include "core/elementwise.h"

#include "core/element_arithmetic.h"
#include "core/error.h"

namespace zrt {

std::string_view nameOf(ElementwiseOp op) {
  switch (op) {
    case ElementwiseOp::Fill: return "fill";
    case ElementwiseOp::Cast: return "cast";
  }
  return "?";
}

void checkElementwise(const ElementwiseArgs& a) {
  if (a.count == 0) return;
  if (!a.out) ZRT_THROW(InvalidArgument, "element-wise ", nameOf(a.op), " of ", a.count, " elements: no output buffer");
  if (a.op == ElementwiseOp::Cast && !a.in)
    ZRT_THROW(InvalidArgument, "element-wise cast of ", a.count, " elements: no input buffer");
}

namespace {

struct HostAccess {
  static float load(DType t, const void* base, std::int64_t i) {
    return loadElement(t, base, static_cast<std::size_t>(i));
  }
  static void store(DType t, void* base, std::int64_t i, float v) {
    storeElement(t, base, static_cast<std::size_t>(i), v);
  }
};

}  // namespace

void runElementwiseOnHost(const ElementwiseArgs& a) {
  const auto n = static_cast<std::int64_t>(a.count);
  for (std::int64_t i = 0; i < n; ++i) elementwiseAt<HostAccess>(a, i);
}

}  // namespace zrt
