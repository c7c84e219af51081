#include "comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>

#include "comm/mpi_check.h"
#include "comm/nccl/nccl_check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace zrt::comm {
namespace {

ncclDataType_t ncclType(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclUniqueId idFromMpi(MPI_Comm comm) {
  int rank = 0;
  ZRT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ncclUniqueId id{};
  if (rank == 0) ZRT_CHECK_NCCL(ncclApi().getUniqueId(&id));
  ZRT_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  return id;
}

int mpiRank(MPI_Comm c) {
  int r = 0;
  ZRT_CHECK_MPI(MPI_Comm_rank(c, &r));
  return r;
}
int mpiSize(MPI_Comm c) {
  int n = 1;
  ZRT_CHECK_MPI(MPI_Comm_size(c, &n));
  return n;
}

}  // namespace

ncclUniqueId NcclCommunicator::newUniqueId() {
  ncclUniqueId id{};
  ZRT_CHECK_NCCL(ncclApi().getUniqueId(&id));
  return id;
}

NcclCommunicator::NcclCommunicator(CudaDevice& device, Stream& computeStream, MPI_Comm comm,
                                   std::chrono::milliseconds timeout)
    : NcclCommunicator(device, computeStream, idFromMpi(comm), mpiRank(comm), mpiSize(comm),
                       timeout) {}

NcclCommunicator::NcclCommunicator(CudaDevice& device, Stream& computeStream,
                                   const ncclUniqueId& id, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : device_(device), compute_(computeStream), rank_(rank), size_(size), stats_(size) {
  device_.makeCurrent();
  commStream_ = device_.createStream();
  ready_ = device_.createEvent();
  barrierScratch_ = device_.allocate(sizeof(float), MemTag::CommBuckets);
  comm_ = NcclComm::initRank(size, id, rank, timeout);
  start(timeout);
}

void NcclCommunicator::start(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  try {
    device_.makeCurrent();  // the members below are freed on this thread, maybe not the poster's
    commStream_->synchronize(timeout_);
  } catch (const std::exception& e) {
    logError(detail::cat("NCCL communicator shutting down with work unfinished: ", e.what()));
    abort();
  }
  // comm_ (destroyed before the stream and the events) finalises with a bounded wait.
}

void NcclCommunicator::abort() {
  comm_.interrupt();  // a post waiting in NcclComm::settle gives up and releases postMu_
  std::lock_guard lock(postMu_);
  comm_.abort();
}

InFlight NcclCommunicator::inFlight() const {
  std::lock_guard lock(mu_);
  if (inFlight_.empty()) return {};
  const Pending& f = inFlight_.front();
  return {true, f.kind,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - f.posted).count()};
}

void NcclCommunicator::setOnTimeout(std::function<void(const std::string&)> onTimeout) {
  std::lock_guard lock(mu_);
  onTimeout_ = std::move(onTimeout);
}

void NcclCommunicator::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  timeout_ = timeout;
}

Work NcclCommunicator::post(Collective op) {
  validate(op, rank_, size_);
  std::lock_guard serial(postMu_);
  if (!comm_) ZRT_THROW(PeerError, describe(op), ": the NCCL communicator was aborted");
  device_.makeCurrent();
  // The communication stream starts after the compute work queued so far (it produced the data).
  ready_->record(compute_);
  commStream_->waitEvent(*ready_);
  enqueueNccl(op);
  std::shared_ptr<Event> done = device_.createEvent();
  done->record(*commStream_);
  // As the MPI backend names its operations: "allReduce #3 (4.00 KiB fp32, nccl)".
  const std::string text =
      op.kind == OpKind::Barrier
          ? detail::cat(nameOf(op.kind), " #", ++seq_, " (nccl)")
          : detail::cat(nameOf(op.kind), " #", ++seq_, " (", formatBytes(opBytes(op)), " ",
                        nameOf(op.dtype), ", nccl)");
  auto state = std::make_shared<WorkState>(text);
  state->setDevicePoll([done] { return done->query(); }, done);
  {
    std::lock_guard lock(mu_);
    inFlight_.push_back(Pending{done, text, op.kind, opBytes(op), std::chrono::steady_clock::now()});
  }
  return Work(state);
}

namespace {

// Ends a group on every path: a group left open on a throw would swallow later calls.
struct NcclGroup {
  NcclComm& comm;
  bool open = true;
  explicit NcclGroup(NcclComm& c) : comm(c) { ZRT_CHECK_NCCL(ncclApi().groupStart()); }
  // Launches the group's calls; a nonblocking communicator may finish that in the background.
  void end() {
    open = false;
    comm.settle(ncclApi().groupEnd(), "ncclGroupEnd");
  }
  ~NcclGroup() {
    if (!open) return;
    const ncclResult_t rc = ncclApi().groupEnd();
    if (rc != ncclSuccess && rc != ncclInProgress)
      logError(detail::cat("ncclGroupEnd after a failed call: ", ncclApi().getErrorString(rc)));
  }
};

}  // namespace

void NcclCommunicator::enqueueNccl(const Collective& op) {
  auto stream = static_cast<cudaStream_t>(commStream_->native());
  ncclComm_t c = comm_.get();
  const ncclDataType_t type = ncclType(op.dtype);
  const std::size_t es = dtypeSize(op.dtype);
  const auto* in = static_cast<const char*>(op.send);
  auto* out = static_cast<char*>(op.recv);
  switch (op.kind) {
    case OpKind::Barrier:
      comm_.settle(ncclApi().allReduce(barrierScratch_.data(), barrierScratch_.data(), 1,
                                       ncclFloat32, ncclSum, c, stream),
                   "ncclAllReduce (barrier)");
      return;
    case OpKind::AllReduce:
      comm_.settle(ncclApi().allReduce(op.send, op.recv, op.count, type, ncclSum, c, stream),
                   "ncclAllReduce");
      return;
    case OpKind::Broadcast:
      comm_.settle(ncclApi().broadcast(op.recv, op.recv, op.count, type, op.root, c, stream),
                   "ncclBroadcast");
      return;
    case OpKind::ReduceScatter: {
      const bool equal = std::all_of(op.counts.begin(), op.counts.end(),
                                     [&](std::size_t n) { return n == op.counts[0]; });
      if (equal) {
        comm_.settle(
            ncclApi().reduceScatter(op.send, op.recv, op.counts[0], type, ncclSum, c, stream),
            "ncclReduceScatter");
        return;
      }
      // One reduce per segment, rooted at its owner, issued as one group (calls inside a group
      // only record, so they return ncclSuccess even on a nonblocking communicator).
      NcclGroup group(comm_);
      for (int r = 0; r < size_; ++r) {
        const std::size_t n = op.counts[static_cast<std::size_t>(r)];
        if (n == 0) continue;
        const char* seg = in + segmentOffset(op, r) * es;
        ZRT_CHECK_NCCL(ncclApi().reduce(seg, r == rank_ ? op.recv : const_cast<char*>(seg), n, type,
                                        ncclSum, r, c, stream));
      }
      group.end();
      return;
    }
    case OpKind::AllGather: {
      const bool equal = op.displs.empty() &&
                         std::all_of(op.counts.begin(), op.counts.end(),
                                     [&](std::size_t n) { return n == op.counts[0]; });
      if (equal) {
        comm_.settle(ncclApi().allGather(op.send, op.recv, op.counts[0], type, c, stream),
                     "ncclAllGather");
        return;
      }
      // One broadcast per contribution, rooted at its owner, issued as one group.
      NcclGroup group(comm_);
      for (int r = 0; r < size_; ++r) {
        const std::size_t n = op.counts[static_cast<std::size_t>(r)];
        if (n == 0) continue;
        ZRT_CHECK_NCCL(ncclApi().broadcast(r == rank_ ? op.send : nullptr,
                                           out + segmentOffset(op, r) * es, n, type, r, c, stream));
      }
      group.end();
      return;
    }
  }
}

void NcclCommunicator::watch() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Polls the oldest operation's event every millisecond (operations finish in order).
    cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_; });
    while (!inFlight_.empty()) {
      Pending& f = inFlight_.front();
      bool done = false;
      try {
        done = f.done->query();
      } catch (const std::exception& e) {
        logError(detail::cat(f.description, " failed on the device: ", e.what()));
        done = true;
      }
      const auto age = std::chrono::steady_clock::now() - f.posted;
      if (done) {
        stats_.record(f.kind, f.bytes, std::chrono::duration<double>(age).count());
        inFlight_.pop_front();
        continue;
      }
      if (age > timeout_) {
        const std::string report = detail::cat(
            "collective timeout: ", f.description, " (", f.bytes, " bytes) has not completed after ",
            std::chrono::duration<double>(age).count(), " s on rank ", rank_,
            "; aborting the NCCL communicator");
        auto handler = onTimeout_;
        inFlight_.clear();
        lock.unlock();
        if (handler) {
          handler(report);
        } else {
          logError(report);
          abort();
          int initialized = 0, finalized = 0;
          MPI_Initialized(&initialized);
          MPI_Finalized(&finalized);
          if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
          std::abort();
        }
        lock.lock();
      }
      break;
    }
  }
}

}  // namespace zrt::comm
