// zrt._zrt.AsyncIO: the offload engine (offload/offload_engine.h: io_uring rings, O_DIRECT,
// transfers split by block size, short transfers finished, failures naming file, offset and
// errno) over Python buffers, for zrt.ops.AsyncIO (DeepSpeed's aio handle).
// A buffer or offset O_DIRECT cannot take as it is (a torch tensor is 64-byte aligned, not
// 4096) goes through an aligned bounce buffer; new_aligned() gives buffers that need none.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "offload/fault_injecting_engine.h"
#include "offload/offload_engine.h"
#include "python/bindings/buffers.h"
#include "python/bindings/module.h"

namespace py = pybind11;

namespace zrt::python {
namespace {

class AsyncIo {
 public:
  AsyncIo(std::uint64_t blockSize, int queueDepth, bool singleSubmit, bool overlapEvents, int parallelism,
          const std::string& engine, const std::string& direct, std::int64_t faultTransfer)
      : engine_(options(blockSize, queueDepth, singleSubmit, overlapEvents, parallelism, engine, direct,
                        faultTransfer)) {}

  ~AsyncIo() {
    // Requests still in flight write into (or read from) buffers Python owns: finish them
    // before those can go. Errors were the caller's to collect with wait(); here they can only
    // be dropped, since a destructor must not throw.
    for (Pending& p : pending_) {
      try {
        p.handle.wait();
      } catch (...) {
      }
    }
  }

  void submit(offload::IoDir dir, const py::buffer& buffer, const std::string& path, std::uint64_t offset) {
    const std::string what = std::string(offload::nameOf(dir)) + " of " + path;
    const BufferView b = bytesOf(buffer, what, dir == offload::IoDir::Read);
    std::shared_ptr<offload::OffloadFile> file = fileFor(path, dir);
    const std::size_t align = file->alignment();
    if (offset % align != 0)
      ZRT_THROW(InvalidArgument, what, ": offset ", offset, " is not a multiple of ", align,
                " (the file is opened with O_DIRECT)");
    Pending p;
    p.keep = buffer;
    void* io = b.data;
    if (reinterpret_cast<std::uintptr_t>(b.data) % align != 0) {
      p.bounce = std::make_unique<offload::AlignedBuffer>(std::max<std::size_t>(b.bytes, 1), align);
      if (dir == offload::IoDir::Write) std::memcpy(p.bounce->data(), b.data, b.bytes);
      else p.copyBackTo = b.data;
      io = p.bounce->data();
    }
    p.bytes = b.bytes;
    {
      // The engine only appends the request; its rings move the bytes without the GIL.
      p.handle = dir == offload::IoDir::Read ? engine_.read(file, offset, io, b.bytes)
                                            : engine_.write(file, offset, io, b.bytes);
    }
    pending_.push_back(std::move(p));
  }

  // Waits for every request submitted; returns how many finished. When some failed, every one
  // is still waited for (no transfer is left writing into freed memory) and the first error is
  // raised.
  std::size_t wait() {
    std::vector<Pending> batch;
    batch.swap(pending_);
    std::exception_ptr first;
    {
      py::gil_scoped_release unlocked;
      for (Pending& p : batch) {
        try {
          p.handle.wait();
          if (p.copyBackTo) std::memcpy(p.copyBackTo, p.bounce->data(), p.bytes);
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
    }
    if (first) std::rethrow_exception(first);
    return batch.size();
  }

  std::size_t pending() const { return pending_.size(); }
  std::string describe() const { return engine_.describe(); }

 private:
  struct Pending {
    offload::IoHandle handle;
    py::object keep;  // the caller's buffer, alive until the request is done
    std::unique_ptr<offload::AlignedBuffer> bounce;
    void* copyBackTo = nullptr;
    std::size_t bytes = 0;
  };

  static offload::AioOptions options(std::uint64_t blockSize, int queueDepth, bool singleSubmit,
                                     bool overlapEvents, int parallelism, const std::string& engine,
                                     const std::string& direct, std::int64_t faultTransfer) {
    offload::AioOptions o;
    o.block_size = blockSize;
    o.queue_depth = queueDepth;
    o.single_submit = singleSubmit;
    o.overlap_events = overlapEvents;
    o.intra_op_parallelism = parallelism;
    o.engine = offload::parseEngineKind(engine);
    o.direct = offload::parseDirectIo(direct);
    if (faultTransfer >= 0) {
      // Test hook: transfer `faultTransfer` of ring 0 fails with EIO, as a failing drive would.
      const auto n = static_cast<std::uint64_t>(faultTransfer);
      o.wrap_engine = [n](std::unique_ptr<offload::IoEngine> inner, int ring) -> std::unique_ptr<offload::IoEngine> {
        if (ring != 0) return inner;
        return std::make_unique<offload::FaultInjectingEngine>(
            std::move(inner), [n](const offload::IoUnit&, std::uint64_t seq) -> std::optional<offload::Fault> {
              if (seq == n) return offload::Fault::fail(EIO);
              return std::nullopt;
            });
      };
    }
    offload::validate(o);
    return o;
  }

  std::shared_ptr<offload::OffloadFile> fileFor(const std::string& path, offload::IoDir dir) {
    const bool write = dir == offload::IoDir::Write;
    auto it = files_.find(path);
    // A file first opened for reading is opened again to be written.
    if (it != files_.end() && (!write || it->second.writable)) return it->second.file;
    offload::FileOpenOptions fo = engine_.fileOptions();
    fo.readOnly = !write;
    fo.create = write;
    fo.userNamedPath = true;
    OpenFile f{engine_.open({std::filesystem::path(path)}, fo), write};
    files_[path] = f;
    return f.file;
  }

  struct OpenFile {
    std::shared_ptr<offload::OffloadFile> file;
    bool writable = false;
  };

  offload::OffloadEngine engine_;
  std::map<std::string, OpenFile> files_;
  std::vector<Pending> pending_;
};

}  // namespace

void bindAsyncIo(py::module_& m) {
  py::class_<AsyncIo>(m, "AsyncIO")
      .def(py::init<std::uint64_t, int, bool, bool, int, const std::string&, const std::string&, std::int64_t>(),
           py::arg("block_size"), py::arg("queue_depth"), py::arg("single_submit"), py::arg("overlap_events"),
           py::arg("intra_op_parallelism"), py::arg("engine"), py::arg("direct"), py::arg("fault_transfer"))
      .def("pread",
           [](AsyncIo& io, const py::buffer& b, const std::string& path, std::uint64_t offset) {
             io.submit(offload::IoDir::Read, b, path, offset);
           })
      .def("pwrite",
           [](AsyncIo& io, const py::buffer& b, const std::string& path, std::uint64_t offset) {
             io.submit(offload::IoDir::Write, b, path, offset);
           })
      .def("wait", &AsyncIo::wait)
      .def("pending", &AsyncIo::pending)
      .def("describe", &AsyncIo::describe);

  m.def(
      "new_aligned",
      [](std::size_t bytes, std::size_t alignment) {
        auto* owner = new offload::AlignedBuffer(std::max<std::size_t>(bytes, 1), alignment);
        py::capsule free(owner, [](void* p) { delete static_cast<offload::AlignedBuffer*>(p); });
        return py::array(py::dtype::of<std::uint8_t>(), {static_cast<py::ssize_t>(bytes)}, {},
                         owner->data(), free);
      },
      py::arg("bytes"), py::arg("alignment") = 4096,
      "Zeroed bytes at an address that is a multiple of `alignment` (O_DIRECT takes them as they are).");
}

}  // namespace zrt::python
