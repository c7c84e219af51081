// How torch memory crosses into ZRT and ZRT memory out to torch through DLPack: a capsule from
// `torch.utils.dlpack.to_dlpack(t)` is read as a pointer, element count, element type and
// device, with no copy; ZRT memory goes out as a capsule that `torch.utils.dlpack.from_dlpack`
// turns into a tensor over it, kept alive by an owner object. Neither side links the other's C++
// ABI: any torch that speaks DLPack (1.10 and later) works, and bf16 crosses as bf16.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "python/bindings/buffers.h"

namespace zrt::python {

// Where a tensor's memory lives: host memory, or the memory of GPU `index` (torch's
// cuda:<index>, DLPack's kDLCUDA with that device_id).
struct TensorPlace {
  bool cuda = false;
  int index = 0;
  std::string name() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// The memory of a DLPack capsule: a C-contiguous tensor of float32, float16 or bfloat16 at
// `place`. Throws zrt InvalidArgument naming `what` for anything else (not a capsule, a capsule
// already consumed, another element type, strides, a tensor elsewhere: another GPU, CUDA managed
// or pinned memory, another device type). The capsule's owner frees the memory when the capsule
// goes: hold it while the view is used.
BufferView viewOfCapsule(const pybind11::object& capsule, const std::string& what,
                         const TensorPlace& place = {});

// A DLPack capsule over `data` (row-major, `shape`) at `place` that holds `owner` until the
// tensor made from it (or the capsule, when none is made) is gone.
pybind11::capsule capsuleOver(void* data, DType dtype, const std::vector<std::int64_t>& shape,
                              const pybind11::object& owner, const TensorPlace& place = {});

}  // namespace zrt::python
