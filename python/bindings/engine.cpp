// zrt._zrt.Engine: the C++ Engine (runtime/engine.h) for zrt.initialize (python/zrt/engine.py).
// The Python side registers a torch model's parameters as modules (plain data: names, shapes,
// initial values as DLPack capsules) and drives the micro-step protocol from torch hooks; tensors
// cross through DLPack (python/bindings/dlpack_tensor.h), with no copy either way. MPI is
// initialised on first use (MPI_THREAD_MULTIPLE) and finalised by zrt's atexit handler, once
// every Engine is gone.
// A model on the GPU (its parameters on cuda:<local rank>) gets an Engine on that GPU, with NCCL
// carrying the model's data and MPI the agreements; torch's stream and the Engine's are ordered
// through events (python/bindings/stream_order.h).
#include "runtime/engine.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/agreed_failure.h"
#include "comm/caller_label.h"
#include "comm/mpi/left_peers.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/peer_loss.h"
#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "core/build_config.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_ledger.h"
#include "python/bindings/dlpack_tensor.h"
#include "python/bindings/module.h"
#include "python/bindings/stream_order.h"
#include "runtime/collective_failure.h"

#if ZRT_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#include "core/cuda/cuda_device.h"
#endif

namespace py = pybind11;

namespace zrt::python {
namespace {

std::unique_ptr<comm::MpiEnvironment>& mpiEnvironment() {
  static std::unique_ptr<comm::MpiEnvironment> env;
  return env;
}

// Engines alive: MPI may be finalised only when none is left (each owns a communicator).
int& liveEngines() {
  static int n = 0;
  return n;
}

class PyEngine;
// The Python engines alive, in the order they were made (what the exit handler closes, the same
// order on every rank).
std::vector<PyEngine*>& engineRegistry() {
  static std::vector<PyEngine*> all;
  return all;
}

}  // namespace

void ensureMpi() {
  if (mpiEnvironment()) return;
  int argc = 0;
  char** argv = nullptr;
  mpiEnvironment() = std::make_unique<comm::MpiEnvironment>(&argc, &argv);
}

namespace {

// One parameter as Python registers it.
struct PyParam {
  std::string name;
  std::vector<std::int64_t> shape;
  py::object values;  // a DLPack capsule of float32, numel elements: the initial value
  bool trainable = true;
  int group = 0;  // index into the groups the Engine is given
};

// A parameter group as Python gives it: (lr, weight_decay), negative for the config's.
using PyGroup = std::pair<double, double>;

// One parameter's initial value where Python holds it (the torch parameter's own memory for an
// fp32 model): the Engine reads it there, so set-up holds no copy of the model beside the torch
// model and the Engine's state (at 4 bytes a parameter, what ZeRO stage 3 exists not to hold).
struct InitialValue {
  float* data;
  std::uint64_t numel;
};

// Rank 0's initial values, on every rank (as deepspeed.initialize broadcasts rank 0's model):
// ranks that built their models from different seeds would otherwise train different replicas
// at stages 0-2 without a word. The values are broadcast in place, parameter by parameter, into
// the buffers Python registered (as DeepSpeed broadcasts into the module's parameters), after
// the ranks have agreed on the parameters' count and total length, so models that differ fail on
// every rank instead of mismatching calls (the Engine then compares names and shapes).
void broadcastFromRankZero(const std::vector<InitialValue>& values) {
  std::uint64_t elements = 0;
  for (const InitialValue& v : values) elements += v.numel;
  long long mine[2] = {static_cast<long long>(values.size()), static_cast<long long>(elements)};
  long long lo[2], hi[2];
  ZRT_CHECK_MPI(MPI_Allreduce(mine, lo, 2, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
  ZRT_CHECK_MPI(MPI_Allreduce(mine, hi, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
  if (lo[0] != hi[0] || lo[1] != hi[1])
    ZRT_THROW(InvalidArgument, "zrt.initialize: the ranks registered different models (this rank: ", mine[0],
              " parameters, ", mine[1], " elements; over the ranks ", lo[0], "-", hi[0], " parameters, ", lo[1],
              "-", hi[1], " elements)");
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 28;  // elements per MPI call: counts are int
  for (const InitialValue& v : values) {
    for (std::uint64_t at = 0; at < v.numel; at += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, v.numel - at));
      ZRT_CHECK_MPI(MPI_Bcast(v.data + at, n, MPI_FLOAT, 0, MPI_COMM_WORLD));
    }
  }
}

// Every rank's set-up (config parsing, device, the model's registration) must have succeeded
// before the first collective that assumes it did: otherwise the ranks that succeeded would
// wait in broadcastFromRankZero for one that gave up. Every rank makes this MPI_Allreduce first;
// where some rank failed, it rethrows its own error and the others raise an error of the same
// class (runtime/collective_failure.h's failureOf: an IoError on one rank is an IoError on every
// rank, so `except` clauses work the same everywhere) naming the lowest failing rank with that
// rank's message.
void agreeOnSetUp(std::exception_ptr failure) {
  int rank = 0;
  ZRT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  std::string message;  // failureOf's: the text marked with its class
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      message = failureOf(e);
    } catch (...) {
      message = "an unknown exception";
    }
  }
  const int mine = failure ? rank : INT_MAX;
  int first = INT_MAX;  // the lowest failing rank
  ZRT_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT_MAX) return;
  long long length = static_cast<long long>(message.size());
  ZRT_CHECK_MPI(MPI_Bcast(&length, 1, MPI_LONG_LONG, first, MPI_COMM_WORLD));
  std::string text(static_cast<std::size_t>(length), '\0');
  if (rank == first) text = message;
  if (length > 0) ZRT_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, first, MPI_COMM_WORLD));
  // Every rank raises now, having heard that the others do: no teardown warning is due
  // (comm/agreed_failure.h).
  comm::markAgreedFailure();
  if (failure) std::rethrow_exception(failure);
  std::vector<std::string> failures(static_cast<std::size_t>(first) + 1);
  failures.back() = text;
  const std::string report =
      "zrt.initialize: rank " + std::to_string(first) + " failed to set up: " + std::string(failureText(text));
  throwAsMarkedClass(failures, report, __FILE__, __LINE__);
  ZRT_THROW(PeerError, report);
}

// This rank's place among the ranks of its node: Open MPI's mpirun says it
// (OMPI_COMM_WORLD_LOCAL_RANK); elsewhere the ranks sharing memory with this one are counted.
// Collective in that case, on every rank alike (a launcher sets the variable for all or none).
int nodeLocalRank() {
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); env && *env)
    return std::atoi(env);
  MPI_Comm node = MPI_COMM_NULL;
  ZRT_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0;
  ZRT_CHECK_MPI(MPI_Comm_rank(node, &rank));
  ZRT_CHECK_MPI(MPI_Comm_free(&node));
  return rank;
}

// torch's name of the device a model's parameters are on ("cpu", "cuda:0"), as a TensorPlace.
TensorPlace placeOf(const std::string& device, const std::string& param) {
  if (device == "cpu") return {};
  const std::string prefix = "cuda:";
  if (device.rfind(prefix, 0) == 0 && device.size() > prefix.size() &&
      device.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
    return {true, std::atoi(device.c_str() + prefix.size())};
  ZRT_THROW(InvalidArgument, "zrt.initialize: parameter ", param, " is on ", device,
            "; zrt trains models on cpu or cuda:<local rank>");
}

// The device a model on `place` trains on: the config's for a CPU model (whose memory torch must
// read: the host device), this rank's GPU for a CUDA model, which must be the GPU torch put it on.
std::unique_ptr<Device> deviceFor(const TensorPlace& place, const std::string& param, int localRank,
                                  const Config& config, MemoryLedger& ledger) {
  if (!place.cuda) {
    auto device = makeDevice(deviceSpec(config), ledger);
    // The package hands torch the Engine's parameters and gradients as host memory.
    if (!device->hostReadsDeviceMemory())
      ZRT_THROW(InvalidArgument, "zrt: zrt.device ", device->name(), " in ", config.source,
                ": the Python package hands a CPU model the engine's memory directly, so a CPU "
                "model runs on device host only (move the model to cuda:<local rank> to train on "
                "the GPU)");
    return device;
  }
#if ZRT_HAVE_CUDA && ZRT_HAVE_NCCL
  const std::string mine = "cuda:" + std::to_string(localRank);
  if (place.index != localRank)
    ZRT_THROW(InvalidArgument, "zrt.initialize: parameter ", param, " is on ", place.name(),
              "; this rank's engine runs on ", mine,
              " (the rank's place on its node): move the model to ", mine,
              " (torch.cuda.set_device(local_rank); model.to(\"cuda\"))");
  const std::string& asked = config.zrt.device;
  if (asked != "host" && asked != "cuda" && asked != mine)
    ZRT_THROW(InvalidArgument, "zrt.initialize: zrt.device ", asked, " in ", config.source,
              ", but parameter ", param, " is on ", place.name(),
              ": a CUDA model trains on its own GPU (leave zrt.device out)");
  return makeDevice(mine, ledger);
#else
  (void)localRank;
  (void)config;
  (void)ledger;
  ZRT_THROW(InvalidArgument, "zrt.initialize: parameter ", param, " is on ", place.name(),
            ", but this zrt build has no CUDA (it was built without the CUDA toolkit and NCCL: "
            "ZRT_CUDA); train on cpu or rebuild zrt where nvcc and NCCL are installed");
#endif
}

// Every rank's model on the same kind of device: the GPU ranks would otherwise wait in NCCL's
// set-up for ranks that never join it. Collective; every rank raises alike.
void agreeOnPlace(const TensorPlace& place) {
  const int mine = place.cuda ? 1 : 0;
  int lo = 0, hi = 0;
  ZRT_CHECK_MPI(MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  ZRT_CHECK_MPI(MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (lo == hi) return;
  comm::markAgreedFailure();
  ZRT_THROW(InvalidArgument,
            "zrt.initialize: some ranks' models are on cuda and others' on cpu (this rank's: ",
            place.name(), "); every rank trains on the same kind of device");
}

// The model as registered, its initial values still where Python holds them (this rank's own
// until broadcastFromRankZero makes them rank 0's).
struct LocalModel {
  EngineModel model;
  std::vector<InitialValue> values;
};

LocalModel localModelOf(const std::vector<std::pair<std::string, std::vector<PyParam>>>& modules,
                        const std::vector<PyGroup>& groups) {
  LocalModel local;
  if (!groups.empty()) {
    local.model.groups.clear();
    for (const auto& [lr, wd] : groups) local.model.groups.push_back(ParamGroup{lr, wd});
  }
  for (const auto& [name, params] : modules) {
    ModuleSpec m{name, {}};
    for (const PyParam& p : params) {
      ParamSpec s;
      s.name = p.name;
      s.shape = p.shape;
      s.trainable = p.trainable;
      s.group = p.group;
      // Writable: rank 0's values are broadcast into it.
      const BufferView v = viewOfCapsule(p.values, "initial value of " + name + "." + p.name);
      if (v.dtype != DType::F32)
        ZRT_THROW(InvalidArgument, "initial value of ", name, ".", p.name, " must be float32");
      if (v.numel != numelOf(s))
        ZRT_THROW(InvalidArgument, "initial value of ", name, ".", p.name, " has ", v.numel,
                  " elements; its shape holds ", numelOf(s));
      local.values.push_back({static_cast<float*>(v.data), v.numel});
      m.params.push_back(std::move(s));
    }
    local.model.modules.push_back(std::move(m));
  }
  return local;
}

// The Engine keeps its model (and so the initialisers) for its lifetime but calls each
// initialiser once, at construction, while the Python tensors are alive (the constructor's
// argument). After construction the tensors may be gone: `open` is cleared then, and an
// initialiser called later throws rather than read freed memory.
struct SharedInitialValues {
  std::vector<InitialValue> values;
  bool open = true;
};

EngineModel initialisedFrom(LocalModel local, const std::shared_ptr<SharedInitialValues>& shared) {
  shared->values = std::move(local.values);
  EngineModel& model = local.model;
  std::size_t k = 0;
  for (ModuleSpec& m : model.modules) {
    for (ParamSpec& s : m.params) {
      const std::size_t at = k++;
      const std::uint64_t n = numelOf(s);
      std::string name = m.name + "." + s.name;
      s.init = [shared, at, n, name = std::move(name)](float* out, std::uint64_t numel) {
        if (!shared->open)
          ZRT_THROW(InvalidArgument, "zrt.initialize: initial value of ", name,
                    " asked for after the Engine's construction (the Python tensors are gone)");
        if (numel != n || shared->values.at(at).numel != n)
          ZRT_THROW(InvalidArgument, "zrt.initialize: initial value of ", name, " asked for ", numel,
                    " elements (it has ", n, ")");
        std::copy_n(shared->values[at].data, n, out);
      };
    }
  }
  return std::move(model);
}

// Owns what an Engine needs alive beside it: config, ledger, device, communicator.
class PyEngine {
 public:
  PyEngine(const std::string& configText, const std::string& source,
           const std::vector<std::pair<std::string, std::vector<PyParam>>>& modules,
           const std::vector<PyGroup>& groups, const std::string& device,
           const std::string& deviceOf)
      : comm_((ensurePackageComm(),
               std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, commOptions()))) {
    std::optional<LocalModel> local;
    std::exception_ptr failure;
    const int localRank = nodeLocalRank();  // before anything that may fail: it may be collective
    try {
      config_ = parseConfig(configText, source, comm_->size());
      // The C++ Engine's default optimizer is for programs that supply their own; a script
      // whose config forgot the section would train with settings it never chose.
      if (!config_.optimizer.present)
        ZRT_THROW(InvalidArgument, "zrt.initialize: ", source, " has no optimizer section: give one (\"optimizer\": "
                  "{\"type\": \"AdamW\", \"params\": {\"lr\": ...}}); ZRT runs Adam, AdamW and SGD");
      place_ = placeOf(device, deviceOf);
      device_ = deviceFor(place_, deviceOf, localRank, config_, ledger_);
      // The initial values are host memory even for a CUDA model (Python copies them there for
      // the set-up): MPI broadcasts them and the initialisers read them on the host.
      local.emplace(localModelOf(modules, groups));
    } catch (...) {
      failure = std::current_exception();
    }
    {
      py::gil_scoped_release unlocked;
      agreeOnSetUp(failure);
    }
    py::gil_scoped_release unlocked;
    agreeOnPlace(place_);
    if (place_.cuda) connectGpu();
    broadcastFromRankZero(local->values);
    auto shared = std::make_shared<SharedInitialValues>();
    EngineModel model = initialisedFrom(std::move(*local), shared);
    try {
      engine_ = nccl_
                    ? std::make_unique<Engine>(config_, *device_, *comm_, *nccl_, std::move(model))
                    : std::make_unique<Engine>(config_, *device_, *comm_, std::move(model));
    } catch (...) {
      shared->open = false;
      throw;
    }
    shared->open = false;
    std::vector<InitialValue>().swap(shared->values);
    ++liveEngines();
    engineRegistry().push_back(this);
  }
  ~PyEngine() {
    --liveEngines();
    std::erase(engineRegistry(), this);
  }

  // At the program's exit, for an engine the Python side closed whose object a tensor still
  // keeps (a graph holding views of its parameters): its communicator and Engine go now, as the
  // close would have done, so that MPI can be finalised; the memory such tensors view stays
  // (DeviceMemory::keepFreedMemory, called first) and goes with the process.
  void closeAtExit() {
    if (!engine_ && !comm_) return;
    const comm::CallerLabel label("engine.close() at the program's exit (a tensor still views the engine)",
                                  comm::CallKind::Closing);
    engine_.reset();
    order_.reset();
    nccl_.reset();
    comm_.reset();
  }
  bool holdsCommunicator() const { return comm_ != nullptr; }

  // A rank that dies makes the others raise rather than end (comm/mpi/peer_loss.h): the wait in
  // engine.backward or engine.step raises zrt.errors.PeerError naming the lost rank.
  static comm::CommOptions commOptions() {
    comm::CommOptions o = comm::CommOptions::fromEnvironment();
    o.raiseOnPeerLoss = true;
    return o;
  }
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;

  Engine& e() {
    if (!engine_) ZRT_THROW(InvalidArgument, "engine: used after it left its peers (abandon)");
    return *engine_;
  }
  int rank() const { return comm_ ? comm_->rank() : -1; }
  int worldSize() const { return comm_ ? comm_->size() : 0; }

  // The Python program is ending on an unhandled exception while the peers may still wait in
  // the step's collectives: the Engine and communicator are destroyed as a C++ exception would
  // destroy them, during unwinding, so their collective frees are skipped and MPI_Finalize gets
  // a bounded grace (comm/mpi/left_peers.h) instead of waiting for the peers forever.
  void abandon() {
    // After a peer loss nothing is torn down (the holder leaks the engine: LeakAfterPeerLoss).
    if (comm::peerLost()) return;
    struct Leaving {};
    struct Unwound {
      PyEngine* self;
      ~Unwound() {
        self->engine_.reset();
        self->order_.reset();
        self->nccl_.reset();
        self->comm_.reset();
      }
    };
    try {
      const Unwound u{this};
      throw Leaving{};
    } catch (const Leaving&) {
    }
  }

  py::list views(const std::vector<TensorRef>& refs, const py::object& self) {
    py::list out;
    for (const TensorRef& t : refs) {
      if (t.data)
        out.append(capsuleOver(t.data, t.dtype, *t.shape, self, place_));
      else out.append(py::none());
    }
    return out;
  }

  // Module m's parameters for torch, whose stream (`torchStream`, 0 for a CPU model) reads them
  // after the gather.
  py::list parameters(const py::object& self, std::size_t module, std::uintptr_t torchStream) {
    std::vector<TensorRef> refs;
    {
      py::gil_scoped_release unlocked;
      refs = e().parameters(module);
      torchAfterEngine(torchStream);
    }
    return views(refs, self);
  }

  // Module m's gradients from DLPack capsules (None for a parameter without one this
  // micro-step: zeros), handed on (backwardDone) from where they are: the Engine reads each
  // once, into its bucket, instead of after a copy into its own buffers (a model's worth of
  // memcpy a micro-step, under the GIL). On a GPU the Engine's stream first waits for torch's,
  // which wrote them, and torch's waits for the Engine's reads before it may reuse their memory.
  void reportGradients(std::size_t module, const std::vector<std::optional<py::object>>& grads,
                       std::uintptr_t torchStream) {
    const std::vector<TensorRef> refs = e().gradients(module);
    if (grads.size() != refs.size())
      ZRT_THROW(InvalidArgument, "report_gradients: module ", e().moduleName(module), " has ",
                refs.size(), " parameters, ", grads.size(), " gradients given");
    Stream* const engineStream = order_ ? e().gradientStream() : nullptr;
    if (engineStream) engineAfterTorch(torchStream);
    // `grads` holds the capsules (and their tensors' memory) until backwardDone returns.
    std::vector<const void*> from(refs.size(), nullptr);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const TensorRef& t = refs[i];
      if (!t.data) continue;  // frozen
      const std::size_t bytes = t.numel * dtypeSize(t.dtype);
      if (!grads[i]) {
        // The Engine reads gradients(m) on its gradient stream: zeros queued there come first.
        if (engineStream)
          device_->memsetAsync(t.data, 0, bytes, *engineStream);
        else
          std::memset(t.data, 0, bytes);
        continue;
      }
      const BufferView g =
          viewOfCapsule(*grads[i], "gradient of " + e().moduleName(module) + "." + *t.name, place_);
      if (g.dtype != t.dtype || g.numel != t.numel)
        ZRT_THROW(InvalidArgument, "gradient of ", e().moduleName(module), ".", *t.name, ": ",
                  g.numel, " elements of ", nameOf(g.dtype), "; the engine trains ", t.numel,
                  " of ", nameOf(t.dtype));
      from[i] = g.data;
    }
    py::gil_scoped_release unlocked;
    e().backwardDone(module, from);
    if (engineStream) order_->torchAfterEngine(*engineStream, torchStream);
  }

  // Module m's gathered parameters go back to the Engine, which may gather another module into
  // their memory at once: torch's kernels still queued to read them (`torchStream`) come first.
  void release(std::size_t module, std::uintptr_t torchStream) {
    engineAfterTorch(torchStream);
    e().release(module);
  }

  // The step; torch's stream (`torchStream`) reads the updated parameters after it.
  StepReport step(std::uintptr_t torchStream) {
    StepReport r = e().step();
    torchAfterEngine(torchStream);
    return r;
  }

 private:
  // A CUDA model's data communicator: NCCL over the same ranks, on a stream of its own that it
  // orders after (comm/nccl/nccl_communicator.h); and the events that order torch's stream with
  // the Engine's. Collective (NCCL's set-up), after every rank's set-up succeeded.
  void connectGpu() {
#if ZRT_HAVE_NCCL
    ncclStream_ = device_->createStream();
    nccl_ = std::make_unique<comm::NcclCommunicator>(dynamic_cast<CudaDevice&>(*device_),
                                                     *ncclStream_, MPI_COMM_WORLD);
    order_ = std::make_unique<StreamOrder>(*device_);
#endif
  }

  // The Engine's streams that touch memory torch shares wait for the work torch queued so far:
  // the gradient stream (it reads torch's gradients) and the stream NCCL orders its operations
  // after (every gather, which may write where torch's kernels still read a released module).
  void engineAfterTorch(std::uintptr_t torchStream) {
    if (!order_) return;
    order_->engineAfterTorch(torchStream, {e().gradientStream(), ncclStream_.get()});
  }

  // Torch's stream waits for the Engine's work before it reads what the Engine handed out. The
  // Engine's calls return with that work finished (they wait for it on the host), so this orders
  // torch after it on the device too, at the cost of one event, never a device synchronisation.
  void torchAfterEngine(std::uintptr_t torchStream) {
    if (!order_) return;
    if (Stream* s = e().gradientStream()) order_->torchAfterEngine(*s, torchStream);
  }

  std::unique_ptr<comm::MpiCommunicator> comm_;
  Config config_;
  MemoryLedger ledger_;
  TensorPlace place_;  // where the model's tensors are: what the capsules, both ways, hold
  std::unique_ptr<Device> device_;
  // A CUDA model's: the NCCL stream outlives the communicator that orders after it.
  std::unique_ptr<Stream> ncclStream_;
  std::unique_ptr<comm::Communicator> nccl_;
  std::unique_ptr<StreamOrder> order_;
  std::unique_ptr<Engine> engine_;
};

// The holder of a Python Engine: after a peer loss the engine is left alive, not destroyed: its
// threads may still be blocked in the lost peer's operation and use what it owns, and its
// destructor's collective frees and joins would wait for the lost peer.
struct LeakAfterPeerLoss {
  void operator()(PyEngine* p) const {
    if (comm::peerLost()) {
      --liveEngines();
      return;
    }
    delete p;
  }
};

py::dict reportOf(const StepReport& r) {
  py::dict d;
  d["step"] = r.step;
  d["taken"] = r.taken;
  d["grad_norm"] = r.gradNorm;
  d["loss_scale"] = r.lossScale;
  d["lr"] = r.lr;
  d["compute_seconds"] = r.computeSeconds;
  d["comm_seconds"] = r.commSeconds;
  d["optimizer_seconds"] = r.optimizerSeconds;
  d["io_seconds"] = r.ioSeconds;
  d["gathers_on_demand"] = r.gathersOnDemand;
  d["gathers_prefetched"] = r.gathersPrefetched;
  d["gathers_reused"] = r.gathersReused;
  d["param_reads_ahead"] = r.paramReadsAhead;
  d["param_read_wait_seconds"] = r.paramReadWaitSeconds;
  return d;
}

}  // namespace

void bindEngine(py::module_& m) {
  py::class_<PyParam>(m, "ParamSpec")
      .def(py::init([](std::string name, std::vector<std::int64_t> shape, py::object values, bool trainable,
                       int group) {
             return PyParam{std::move(name), std::move(shape), std::move(values), trainable, group};
           }),
           py::arg("name"), py::arg("shape"), py::arg("values"), py::arg("trainable"), py::arg("group") = 0);

  // Collective calls release the GIL: a rank's other Python threads (a data loader) go on.
  using G = py::call_guard<py::gil_scoped_release>;
  py::class_<PyEngine, std::unique_ptr<PyEngine, LeakAfterPeerLoss>>(m, "Engine")
      // device: torch's name of the device the model's parameters are on ("cpu", "cuda:0");
      // device_of: the parameter named where that device is refused.
      .def(py::init<const std::string&, const std::string&,
                    const std::vector<std::pair<std::string, std::vector<PyParam>>>&,
                    const std::vector<PyGroup>&, const std::string&, const std::string&>(),
           py::arg("config_text"), py::arg("source"), py::arg("modules"),
           py::arg("groups") = std::vector<PyGroup>(), py::arg("device") = "cpu",
           py::arg("device_of") = "")
      .def_property_readonly("rank", &PyEngine::rank)
      .def_property_readonly("world_size", &PyEngine::worldSize)
      .def_property_readonly("stage", [](PyEngine& p) { return p.e().stage(); })
      .def_property_readonly("precision",
                             [](PyEngine& p) { return std::string(nameOf(p.e().precision())); })
      .def_property_readonly("accumulation_steps",
                             [](PyEngine& p) { return p.e().accumulationSteps(); })
      .def_property_readonly("num_modules", [](PyEngine& p) { return p.e().numModules(); })
      .def("gradient_seed", [](PyEngine& p) { return p.e().gradientSeed(); })
      .def("loss_scale", [](PyEngine& p) { return p.e().lossScale(); })
      .def(
          "begin_micro_step", [](PyEngine& p) { p.e().beginMicroStep(); }, G())
      // torch_stream: torch.cuda.current_stream(device).cuda_stream for a CUDA model (the stream
      // that reads or wrote the tensors), 0 for a CPU one.
      .def(
          "parameters",
          [](py::object self, std::size_t module, std::uintptr_t torchStream) {
            return self.cast<PyEngine&>().parameters(self, module, torchStream);
          },
          py::arg("module"), py::arg("torch_stream") = 0)
      .def("release", &PyEngine::release, py::arg("module"), py::arg("torch_stream") = 0, G())
      .def("report_gradients", &PyEngine::reportGradients, py::arg("module"), py::arg("grads"),
           py::arg("torch_stream") = 0)
      .def(
          "end_micro_step", [](PyEngine& p) { p.e().endMicroStep(); }, G())
      .def(
          "step",
          [](PyEngine& p, std::uintptr_t torchStream) {
            StepReport r;
            {
              py::gil_scoped_release unlocked;
              r = p.step(torchStream);
            }
            return reportOf(r);
          },
          py::arg("torch_stream") = 0)
      .def("abandon", &PyEngine::abandon)
      .def("memory_summary", [](PyEngine& p) { return p.e().memorySummary(); })
      // metadata: a JSON object's text, stored verbatim in the manifest (the package records the
      // model's tied parameter names there: docs/checkpoint.md, "tied").
      .def(
          "save",
          [](PyEngine& p, const std::string& dir, const std::string& tag,
             const std::string& metadata) {
            nlohmann::json m = nlohmann::json::parse(metadata);
            py::gil_scoped_release unlocked;
            p.e().save(dir, tag, m);
          },
          py::arg("dir"), py::arg("tag"), py::arg("metadata") = "{}")
      .def(
          "load",
          [](PyEngine& p, const std::string& dir, const std::string& tag) { p.e().load(dir, tag); },
          G())
      .def(
          "load_weights", [](PyEngine& p, const std::string& path) { p.e().loadWeights(path); },
          G())
      // may_be_missing: "<module>/<param>" names the file may lack (they keep their values).
      .def(
          "load_weights",
          [](PyEngine& p, const std::string& path, const std::vector<std::string>& mayBeMissing) {
            p.e().loadWeights(path, mayBeMissing);
          },
          py::arg("path"), py::arg("may_be_missing"), G())
      .def("learning_rates", [](PyEngine& p) { return p.e().learningRates(); })
      .def(
          "set_learning_rates",
          [](PyEngine& p, const std::vector<double>& lrs) { p.e().setLearningRates(lrs); },
          py::arg("per_group"))
      .def("parameter_values", [](PyEngine& p, std::size_t module, std::size_t param) {
        std::vector<float> v;
        {
          py::gil_scoped_release unlocked;
          v = p.e().parameterValues(module, param);
        }
        return py::array_t<float>(static_cast<py::ssize_t>(v.size()), v.data());
      });

  m.def("peer_lost", [] { return comm::peerLost(); },
        "Whether a peer rank was lost (its process exited while this rank waited for it).");
  m.def("finalize",
        [](bool failing) {
          if (failing) comm::leavePeers("the program is ending on an unhandled exception");
          // Engines still referenced (by tensors viewing their memory) are closed here, in the
          // order they were made, with their memory kept: finalising under a live communicator
          // would crash its progress thread. After a peer loss nothing is torn down (the
          // engines may be blocked in the lost peer's operation) and MPI_Finalize is skipped.
          if (!comm::peerLost()) {
            bool kept = false;
            for (PyEngine* e : std::vector<PyEngine*>(engineRegistry())) {
              if (!e->holdsCommunicator()) continue;
              if (!kept) {
                DeviceMemory::keepFreedMemory();
                ZRT_INFO("closing the engine(s) that tensors still reference at exit; their memory stays");
              }
              kept = true;
              if (failing) e->abandon();
              else e->closeAtExit();
            }
          }
          releasePackageComm();
          mpiEnvironment().reset();
        },
        py::arg("failing") = false,
        "Finalises MPI if zrt initialised it (zrt's atexit handler calls it after the engines are gone); "
        "failing: the program is ending on an unhandled exception, so MPI_Finalize waits for the peers "
        "at most ZRT_UNWIND_GRACE_S.");
}

}  // namespace zrt::python
