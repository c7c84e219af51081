#include "python/bindings/buffers.h"

#include "core/error.h"

namespace py = pybind11;

namespace zrt::python {
namespace {

bool contiguous(const py::buffer_info& info) {
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect) return false;
    expect *= info.shape[d];
  }
  return true;
}

py::buffer_info request(const py::buffer& buffer, const std::string& what, bool writable) {
  py::buffer_info info = buffer.request(writable);
  if (!contiguous(info))
    ZRT_THROW(InvalidArgument, what, ": the buffer is not contiguous (pass t.contiguous())");
  return info;
}

}  // namespace

BufferView viewOf(const py::buffer& buffer, const std::string& what, bool writable, bool int16IsBf16) {
  const py::buffer_info info = request(buffer, what, writable);
  BufferView v;
  v.data = info.ptr;
  v.numel = static_cast<std::size_t>(info.size);
  v.bytes = v.numel * static_cast<std::size_t>(info.itemsize);
  const std::string& f = info.format;
  if (f == "f" && info.itemsize == 4) {
    v.dtype = DType::F32;
  } else if (f == "e" && info.itemsize == 2) {
    v.dtype = DType::F16;
  } else if ((f == "h" || f == "H") && info.itemsize == 2 && int16IsBf16) {
    v.dtype = DType::BF16;
  } else {
    ZRT_THROW(InvalidArgument, what, ": elements of format '", f, "' (", info.itemsize,
              " bytes); expected float32, float16 or bf16 bits (int16)");
  }
  return v;
}

BufferView bytesOf(const py::buffer& buffer, const std::string& what, bool writable) {
  const py::buffer_info info = request(buffer, what, writable);
  BufferView v;
  v.data = info.ptr;
  v.numel = static_cast<std::size_t>(info.size);
  v.bytes = v.numel * static_cast<std::size_t>(info.itemsize);
  return v;
}

}  // namespace zrt::python
