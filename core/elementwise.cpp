#include "core/elementwise.h"

#include <cmath>

#include "core/element_arithmetic.h"
#include "core/error.h"

namespace zrt {

std::string_view nameOf(ElementwiseOp op) {
  switch (op) {
    case ElementwiseOp::Fill:
      return "fill";
    case ElementwiseOp::Cast:
      return "cast";
    case ElementwiseOp::Scale:
      return "scale";
    case ElementwiseOp::Divide:
      return "divide";
    case ElementwiseOp::Add:
      return "add";
    case ElementwiseOp::AddDivided:
      return "add divided";
    case ElementwiseOp::Unscale:
      return "unscale";
    case ElementwiseOp::SumSquares:
      return "sum of squares";
    case ElementwiseOp::ReduceSquares:
      return "sum of squares' reduction";
    case ElementwiseOp::AdamStep:
      return "Adam step";
    case ElementwiseOp::SgdStep:
      return "SGD step";
  }
  return "?";
}

ElementwiseExtents extentsOf(const ElementwiseArgs& a) {
  ElementwiseExtents e;
  if (a.count == 0) return e;
  const std::size_t outBytes = a.count * dtypeSize(a.outType);
  const std::size_t inBytes = a.count * dtypeSize(a.inType);
  switch (a.op) {
    case ElementwiseOp::Fill:
      e.out = outBytes;
      break;
    case ElementwiseOp::Cast:
    case ElementwiseOp::Scale:
    case ElementwiseOp::Divide:
    case ElementwiseOp::Add:
    case ElementwiseOp::AddDivided:
      e.out = outBytes, e.in = inBytes;
      break;
    case ElementwiseOp::Unscale:
      e.out = outBytes, e.in = inBytes, e.flag = sizeof(std::int32_t);
      break;
    case ElementwiseOp::SumSquares:
      e.in = a.extent * dtypeSize(a.inType), e.partials = a.count * sizeof(double);
      break;
    case ElementwiseOp::ReduceSquares:
      e.out = 2 * sizeof(double), e.partials = a.extent * sizeof(double);
      break;
    case ElementwiseOp::AdamStep:
      e.out = a.out ? outBytes : 0, e.in = inBytes, e.state = a.count * sizeof(float);
      e.states = 3;
      break;
    case ElementwiseOp::SgdStep:
      e.out = a.out ? outBytes : 0, e.in = inBytes, e.state = a.count * sizeof(float);
      e.states = a.sgd.momentumMode != 0 ? 2 : 1;
      break;
  }
  return e;
}

void checkElementwise(const ElementwiseArgs& a) {
  const ElementwiseExtents e = extentsOf(a);
  const auto missing = [&](const char* what) {
    ZRT_THROW(InvalidArgument, "element-wise ", nameOf(a.op), " of ", a.count, " elements: no ",
              what, " buffer");
  };
  if (e.out && !a.out) missing("output");
  if (e.in && !a.in) missing("input");
  if (e.flag && !a.flag) missing("overflow flag");
  if (e.partials && !a.partials) missing("partial sums");
  for (int k = 0; e.state && k < e.states; ++k)
    if (!a.state[k]) missing("optimizer state");
  if (a.op == ElementwiseOp::SumSquares && a.count != sumSquaresChunks(a.extent))
    ZRT_THROW(InvalidArgument, "element-wise sum of squares over ", a.extent, " elements needs ",
              sumSquaresChunks(a.extent), " chunks, not ", a.count);
  if (a.op == ElementwiseOp::ReduceSquares && a.count > 1)
    ZRT_THROW(InvalidArgument, "element-wise sum of squares' reduction runs as one element, not ",
              a.count);
}

namespace {

// Built with -ffp-contract=off (core/CMakeLists.txt): a multiply and an add stay two roundings
// unless written as ffma, as in the CUDA kernel's intrinsics.
struct HostAccess {
  static float load(DType t, const void* base, std::int64_t i) {
    return loadElement(t, base, static_cast<std::size_t>(i));
  }
  static void store(DType t, void* base, std::int64_t i, float v) {
    storeElement(t, base, static_cast<std::size_t>(i), v);
  }
  static bool isfinite(double x) { return std::isfinite(x); }
  static float fmul(float a, float b) { return a * b; }
  static float fadd(float a, float b) { return a + b; }
  static float fdiv(float a, float b) { return a / b; }
  static float fsqrt(float a) { return std::sqrt(a); }
  static float ffma(float a, float b, float c) { return std::fma(a, b, c); }
  static double dmul(double a, double b) { return a * b; }
  static double dadd(double a, double b) { return a + b; }
};

}  // namespace

void runElementwiseOnHost(const ElementwiseArgs& a) {
  const auto n = static_cast<std::int64_t>(a.count);
  for (std::int64_t i = 0; i < n; ++i) elementwiseAt<HostAccess>(a, i);
}

}  // namespace zrt
