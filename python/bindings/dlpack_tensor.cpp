#include "python/bindings/dlpack_tensor.h"

#include <dlpack/dlpack.h>

#include <memory>

#include "core/error.h"

namespace py = pybind11;

namespace zrt::python {
namespace {

// DLPack's name for a capsule no consumer has taken yet (a consumer renames it "used_dltensor").
constexpr const char* kFresh = "dltensor";

std::string deviceName(const DLDevice& d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda pinned host memory";
    case kDLCUDAManaged:
      return "cuda managed memory (device " + std::to_string(d.device_id) + ")";
    default: return "DLPack device type " + std::to_string(static_cast<int>(d.device_type));
  }
}

std::string typeName(const DLDataType& t) {
  std::string name;
  switch (t.code) {
    case kDLInt: name = "int"; break;
    case kDLUInt: name = "uint"; break;
    case kDLFloat: name = "float"; break;
    case kDLBfloat: name = "bfloat"; break;
    case kDLComplex: name = "complex"; break;
    default: name = "DLPack type code " + std::to_string(static_cast<int>(t.code)) + ", bits "; break;
  }
  name += std::to_string(static_cast<int>(t.bits));
  if (t.lanes != 1) name += " x " + std::to_string(t.lanes) + " lanes";
  return name;
}

DType dtypeOf(const DLDataType& t, const std::string& what) {
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 32) return DType::F32;
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16) return DType::F16;
  if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16) return DType::BF16;
  ZRT_THROW(InvalidArgument, what, ": elements of ", typeName(t), "; expected float32, float16 or bfloat16");
}

// The tensor ZRT exports: DLPack's struct and the shape it points into, with the owner it holds.
struct Exported {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  py::object owner;
};

void deleteExported(DLManagedTensor* self) {
  // Called by the consumer when its tensor goes, maybe on a thread not holding the GIL; dropping
  // the owner is a Python decref.
  py::gil_scoped_acquire gil;
  delete static_cast<Exported*>(self->manager_ctx);
}

}  // namespace

BufferView viewOfCapsule(const py::object& object, const std::string& what,
                         const TensorPlace& place) {
  if (!PyCapsule_CheckExact(object.ptr()))
    ZRT_THROW(InvalidArgument, what, ": expected a DLPack capsule (torch.utils.dlpack.to_dlpack(t)), got ",
              std::string(py::str(py::type::of(object).attr("__name__"))));
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(object.ptr(), kFresh));
  if (!managed) {
    PyErr_Clear();
    ZRT_THROW(InvalidArgument, what, ": the DLPack capsule was already consumed (make a new one per call)");
  }
  const DLTensor& t = managed->dl_tensor;
  // Managed memory is refused, not read: the Engine's copies and NCCL would take it, but where it
  // migrates between the host and the GPU is torch's business, and nothing here has run on it.
  const bool there = place.cuda
                         ? t.device.device_type == kDLCUDA && t.device.device_id == place.index
                         : t.device.device_type == kDLCPU;
  if (!there)
    ZRT_THROW(InvalidArgument, what, ": a tensor on ", deviceName(t.device),
              "; the engine works on ", place.name(), " tensors");
  BufferView v;
  v.dtype = dtypeOf(t.dtype, what);
  v.numel = 1;
  for (int d = 0; d < t.ndim; ++d) v.numel *= static_cast<std::size_t>(t.shape[d]);
  if (t.strides) {
    std::int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expect)
        ZRT_THROW(InvalidArgument, what, ": the tensor is not contiguous (pass t.contiguous())");
      expect *= t.shape[d];
    }
  }
  v.bytes = v.numel * dtypeSize(v.dtype);
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  return v;
}

py::capsule capsuleOver(void* data, DType dtype, const std::vector<std::int64_t>& shape,
                        const py::object& owner, const TensorPlace& place) {
  auto exported = std::make_unique<Exported>();
  exported->shape = shape;
  exported->owner = owner;
  DLTensor& t = exported->managed.dl_tensor;
  t.data = data;
  t.device = place.cuda ? DLDevice{kDLCUDA, place.index} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(exported->shape.size());
  t.dtype = DLDataType{static_cast<std::uint8_t>(dtype == DType::BF16 ? kDLBfloat : kDLFloat),
                       static_cast<std::uint8_t>(8 * dtypeSize(dtype)), 1};
  t.shape = exported->shape.data();
  t.strides = nullptr;  // row-major
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = deleteExported;
  // A capsule no consumer took still owns the tensor: its destructor calls the deleter.
  py::capsule capsule(&exported->managed, kFresh, [](PyObject* c) {
    if (!PyCapsule_IsValid(c, kFresh)) return;  // consumed: the consumer calls the deleter
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kFresh));
    m->deleter(m);
  });
  exported.release();
  return capsule;
}

}  // namespace zrt::python
