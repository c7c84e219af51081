// zrt._zrt's collectives on CPU tensors for training scripts (zrt.compat.deepspeed.comm, as
// deepspeed.comm's all_reduce, all_gather, broadcast and barrier): MPI on a duplicate of
// MPI_COMM_WORLD (its own, so a script's collective never matches an Engine's), any dtype MPI has
// a type for. Each is nonblocking MPI polled until ZRT_WAIT_TIMEOUT_S (core/wait.h): a rank that
// never joins makes the others raise zrt.errors.TimeoutError naming the collective, not hang.
// While one waits, its rank counts as waiting outside the engines' communicators: an engine's
// watchdog whose collective waits for this rank meanwhile reports the ranks as diverged
// (comm/mpi/watchdog.h), and this wait then raises zrt.errors.PeerError with that report.
// CallLabel: the package's own ZRT calls (engine.forward, engine.close at exit, ...), named in
// those reports.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <mpi.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "comm/caller_label.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/peer_loss.h"
#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/wait.h"
#include "python/bindings/module.h"

namespace py = pybind11;

namespace zrt::python {
namespace {

comm::MpiCommHandle& packageComm() {
  static comm::MpiCommHandle handle;
  return handle;
}

MPI_Comm comm() {
  ensurePackageComm();
  return packageComm().get();
}

// MPI's type for a numpy array's elements; fp16 and bf16 have none (the Python side widens them).
MPI_Datatype typeOf(const py::array& a, const char* what) {
  const char kind = a.dtype().kind();
  const auto size = a.dtype().itemsize();
  if (kind == 'f' && size == 4) return MPI_FLOAT;
  if (kind == 'f' && size == 8) return MPI_DOUBLE;
  if (kind == 'i' && size == 8) return MPI_INT64_T;
  if (kind == 'i' && size == 4) return MPI_INT32_T;
  if (kind == 'i' && size == 2) return MPI_INT16_T;
  if (kind == 'i' && size == 1) return MPI_INT8_T;
  if (kind == 'u' && size == 1) return MPI_UINT8_T;
  if (kind == 'b' && size == 1) return MPI_C_BOOL;
  ZRT_THROW(InvalidArgument, what, ": no MPI type for elements of kind '", kind, "' and ", size, " bytes");
}

MPI_Op opOf(const std::string& op) {
  if (op == "sum") return MPI_SUM;
  if (op == "max") return MPI_MAX;
  if (op == "min") return MPI_MIN;
  if (op == "product") return MPI_PROD;
  if (op == "band") return MPI_BAND;
  if (op == "bor") return MPI_BOR;
  if (op == "bxor") return MPI_BXOR;
  ZRT_THROW(InvalidArgument, "all_reduce: unknown reduce op '", op, "'");
}

int countOf(const py::array& a, const char* what) {
  if (a.size() > INT32_MAX) ZRT_THROW(InvalidArgument, what, ": ", a.size(), " elements; at most ", INT32_MAX);
  if (!(a.flags() & py::array::c_style)) ZRT_THROW(InvalidArgument, what, ": the tensor is not contiguous");
  return static_cast<int>(a.size());
}

// Waits for `request` without the GIL, at most the default wait timeout.
void wait(MPI_Request& request, const std::string& what) {
  py::gil_scoped_release unlocked;
  const comm::CallerLabel label("zrt.compat.deepspeed.comm." + what, comm::CallKind::WaitsElsewhere);
  const auto limit = defaultWaitTimeout();
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    int done = 0;
    ZRT_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    // The request stays behind: the peers it waits for will not come (the process is ending).
    if (comm::peerLost()) ZRT_THROW(PeerError, what, " abandoned: ", comm::peerLossReport());
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > limit)
      ZRT_THROW(TimeoutError, what, " not complete after waiting ",
                std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
                " s (ZRT_WAIT_TIMEOUT_S): a rank did not call it, or called another collective");
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
  }
}

// The package communicator's ranks are MPI_COMM_WORLD's: asking needs no collective.
int rankOf() {
  ensureMpi();
  int r = 0;
  ZRT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int sizeOf() {
  ensureMpi();
  int n = 0;
  ZRT_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

}  // namespace

void ensurePackageComm() {
  ensureMpi();
  if (packageComm()) return;
  // Collective: zrt.initialize makes it (every rank calls that), so that a collective called on
  // some ranks only is not stuck in this duplication, which has no timeout, but in a wait.
  const comm::CallerLabel label("zrt.compat.deepspeed.comm (creating its communicator)",
                                comm::CallKind::WaitsElsewhere);
  packageComm() = comm::MpiCommHandle::dup(MPI_COMM_WORLD);
}

void releasePackageComm() { packageComm().reset(); }

// A ZRT call of the package's (a context manager): "engine.forward (step 3)", or a close.
class CallLabelScope {
 public:
  CallLabelScope(std::string text, bool closing) : text_(std::move(text)), closing_(closing) {}
  void enter() {
    label_.emplace(text_, closing_ ? comm::CallKind::Closing : comm::CallKind::Call);
  }
  void exit() { label_.reset(); }

 private:
  std::string text_;
  bool closing_;
  std::optional<comm::CallerLabel> label_;
};

void bindComm(py::module_& m) {
  py::class_<CallLabelScope>(m, "CallLabel")
      .def(py::init<std::string, bool>(), py::arg("text"), py::arg("closing") = false)
      .def("__enter__", [](CallLabelScope& s) { s.enter(); })
      .def("__exit__", [](CallLabelScope& s, const py::args&) { s.exit(); });
  m.def("comm_rank", &rankOf, "This process's rank in MPI_COMM_WORLD (MPI initialised on first use).");
  m.def("comm_size", &sizeOf, "The number of ranks.");
  m.def("comm_barrier", [] {
    MPI_Request r;
    ZRT_CHECK_MPI(MPI_Ibarrier(comm(), &r));
    wait(r, "barrier");
  });
  m.def("comm_all_reduce",
        [](py::array a, const std::string& op) {
          const char* what = "all_reduce";
          const MPI_Datatype t = typeOf(a, what);
          const int n = countOf(a, what);
          MPI_Request r;
          ZRT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, a.mutable_data(), n, t, opOf(op), comm(), &r));
          wait(r, "all_reduce (" + op + ") of " + std::to_string(n) + " elements");
        },
        py::arg("array"), py::arg("op"), "In place, over every rank.");
  m.def("comm_broadcast",
        [](py::array a, int root) {
          const char* what = "broadcast";
          const MPI_Datatype t = typeOf(a, what);
          const int n = countOf(a, what);
          if (root < 0 || root >= sizeOf())
            ZRT_THROW(InvalidArgument, "broadcast: src ", root, " is not a rank (", sizeOf(), " ranks)");
          MPI_Request r;
          ZRT_CHECK_MPI(MPI_Ibcast(a.mutable_data(), n, t, root, comm(), &r));
          wait(r, "broadcast from rank " + std::to_string(root) + " of " + std::to_string(n) + " elements");
        },
        py::arg("array"), py::arg("root"), "In place, rank root's values to every rank.");
  m.def("comm_all_gather",
        [](py::array send, py::array recv) {
          const char* what = "all_gather";
          const MPI_Datatype t = typeOf(send, what);
          const int n = countOf(send, what);
          if (typeOf(recv, what) != t || recv.size() != static_cast<py::ssize_t>(n) * sizeOf())
            ZRT_THROW(InvalidArgument, "all_gather: the output holds ", recv.size(), " elements; ", sizeOf(),
                      " ranks of ", n, " of the same dtype need ", static_cast<long long>(n) * sizeOf());
          countOf(recv, what);
          MPI_Request r;
          ZRT_CHECK_MPI(MPI_Iallgather(send.data(), n, t, recv.mutable_data(), n, t, comm(), &r));
          wait(r, "all_gather of " + std::to_string(n) + " elements a rank");
        },
        py::arg("send"), py::arg("recv"), "Every rank's `send`, in rank order, into `recv`.");
}

}  // namespace zrt::python
