// How the DeepSpeed-style operators (cpu_adam, async_io) and the collectives read memory from
// Python without linking torch: a Python object exporting the buffer protocol (a numpy view of a
// torch tensor, `t.numpy()`, or of bf16 bits, `t.view(torch.int16).numpy()`) is read as a
// pointer, length and element type. The Engine's tensors cross through DLPack instead
// (dlpack_tensor.h).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zrt::python {

struct BufferView {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::size_t numel = 0;
  DType dtype = DType::F32;
};

// A C-contiguous buffer of float32 ('f'), float16 ('e') or 16-bit integers read as bf16 bits
// ('h'/'H', only when `int16IsBf16`). Throws zrt InvalidArgument naming `what` for anything else
// (another type, strides, a read-only buffer when `writable`).
BufferView viewOf(const pybind11::buffer& buffer, const std::string& what, bool writable,
                  bool int16IsBf16 = true);

// Any C-contiguous buffer as raw bytes (the I/O paths move bytes, whatever they hold).
BufferView bytesOf(const pybind11::buffer& buffer, const std::string& what, bool writable);

}  // namespace zrt::python
