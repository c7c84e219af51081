// Element-wise device kernels written once: the body of each kernel (elementwiseAt) is one
// function over element i that every backend runs. Device::launch queues it on a stream: the
// host devices run it on the stream's thread (the strict device through its private alias of
// device memory), the CUDA device as a __global__ kernel (core/cuda/elementwise_kernels.cu),
// each with its own way of loading and storing one element (Access), both rounding to nearest
// even as core/dtype.h, so the backends store the same bits.
// The family so far: fills and fp32 <-> fp16/bf16 casts.
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define ZRT_HOST_DEVICE __host__ __device__
#else
#define ZRT_HOST_DEVICE
#endif

namespace zrt {

enum class ElementwiseOp : int {
  Fill,  // out[i] = value, rounded once to out's type
  Cast,  // out[i] = in[i], widened exactly to fp32 and rounded once to out's type
};
std::string_view nameOf(ElementwiseOp op);

// One launch: `count` elements of `out` (and of `in` for a cast). in and out may be the same
// buffer only when their types have the same size.
struct ElementwiseArgs {
  ElementwiseOp op = ElementwiseOp::Fill;
  std::size_t count = 0;
  DType outType = DType::F32;
  void* out = nullptr;
  DType inType = DType::F32;
  const void* in = nullptr;
  float value = 0;
};

inline ElementwiseArgs fillArgs(DType t, void* out, std::size_t count, float value) {
  ElementwiseArgs a;
  a.op = ElementwiseOp::Fill;
  a.count = count;
  a.outType = t;
  a.out = out;
  a.value = value;
  return a;
}

inline ElementwiseArgs castArgs(DType outType, void* out, DType inType, const void* in,
                                std::size_t count) {
  ElementwiseArgs a;
  a.op = ElementwiseOp::Cast;
  a.count = count;
  a.outType = outType;
  a.out = out;
  a.inType = inType;
  a.in = in;
  return a;
}

// The kernel body, written once: element i of the launch `a`.
template <class Access>
ZRT_HOST_DEVICE inline void elementwiseAt(const ElementwiseArgs& a, std::int64_t i) {
  switch (a.op) {
    case ElementwiseOp::Fill: Access::store(a.outType, a.out, i, a.value); break;
    case ElementwiseOp::Cast:
      Access::store(a.outType, a.out, i, Access::load(a.inType, a.in, i));
      break;
  }
}

// Throws InvalidArgument naming the op when `a` cannot run (a null buffer with count > 0).
void checkElementwise(const ElementwiseArgs& a);

// Runs the launch over every element on the calling thread, through core/dtype.h's conversions:
// what a host device's stream thread runs.
void runElementwiseOnHost(const ElementwiseArgs& a);

}  // namespace zrt
