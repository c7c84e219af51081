// How memory crosses between Python and ZRT without linking torch: a Python object exporting
// the buffer protocol (a numpy view of a torch tensor, `t.numpy()`, or of bf16 bits,
// `t.view(torch.int16).numpy()`) is read as a pointer, length and element type; ZRT memory goes
// out as a numpy array viewing it, kept alive by an owner object (torch.from_numpy shares it).
#pragma once

#include <pybind11/numpy.h>
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

// A numpy array over `data` (float32, float16, or int16 bits for bf16: torch.from_numpy takes int16, not uint16, before 2.3), owned by `owner`.
pybind11::array arrayOver(void* data, DType dtype, const std::vector<std::int64_t>& shape,
                          const pybind11::object& owner);

}  // namespace zrt::python
