#include "comm/mpi/mpi_communicator.h"

#include <climits>

#include "comm/mpi/mpi_large_counts.h"
#include "comm/mpi/peer_loss.h"
#include "comm/mpi/watchdog.h"
#include "comm/mpi_check.h"
#include "comm/progress_thread.h"
#include "comm/mpi/shm/shm_collectives.h"
#include "comm/mpi/shm/shm_team.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt::comm {
namespace {

// What every rank must agree on for one operation.
struct Signature {
  std::uint64_t seq, kind, dtype, total, shape, root;
};

std::uint64_t shapeHash(const Collective& op) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over per-rank counts and displacements
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (auto c : op.counts) mix(c);
  for (auto d : op.displs) mix(d);
  return h;
}

int sizeOf(MPI_Comm comm) {
  int n = 1;
  ZRT_CHECK_MPI(MPI_Comm_size(comm, &n));
  return n;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, CommOptions options)
    : options_(std::move(options)), stats_(sizeOf(comm)) {
  int provided = MPI_THREAD_SINGLE;
  ZRT_CHECK_MPI(MPI_Query_thread(&provided));
  if (provided < MPI_THREAD_MULTIPLE)
    ZRT_THROW(ExternalError, "the MPI backend needs MPI_THREAD_MULTIPLE (its progress thread "
              "calls MPI beside the caller), but MPI was initialised with level ", provided,
              "; initialise through zrt::comm::MpiEnvironment");
  if (options_.maxMpiCount < 1 || options_.maxMpiCount > static_cast<std::size_t>(INT_MAX))
    ZRT_THROW(InvalidArgument, "CommOptions::maxMpiCount must be between 1 and INT_MAX (",
              INT_MAX, "), got ", options_.maxMpiCount);
  opComm_ = MpiCommHandle::dup(comm);
  checkComm_ = MpiCommHandle::dup(comm);
  laneComm_ = MpiCommHandle::dup(comm);
  ZRT_CHECK_MPI(MPI_Comm_rank(opComm_.get(), &rank_));
  ZRT_CHECK_MPI(MPI_Comm_size(opComm_.get(), &size_));

  {
    // Nodes as MPI sees them (the shm team may simulate smaller ones).
    MPI_Comm sharedRaw = MPI_COMM_NULL;
    ZRT_CHECK_MPI(MPI_Comm_split_type(opComm_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sharedRaw));
    MpiCommHandle shared(sharedRaw);
    int localRank = 0;
    ZRT_CHECK_MPI(MPI_Comm_rank(shared.get(), &localRank));
    int leader = localRank == 0 ? 1 : 0;
    ZRT_CHECK_MPI(MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, opComm_.get()));
  }
  if (size_ > 1 && options_.path != CommPath::Mpi) {
    auto team = std::make_unique<ShmTeam>(opComm_.get(), options_.shmBytes,
                                          options_.simulatedRanksPerNode);
    // Shared memory pays off only where some node holds several ranks.
    if (team->maxLocalSize() > 1) team_ = std::move(team);
  }
  if (!team_ && options_.path == CommPath::Shm && size_ > 1)
    warnOnce("comm-shm-unavailable",
             "ZRT_COMM_PATH=shm but no node holds more than one rank; using the MPI path");
  ZRT_INFO("MPI communicator: ", size_, " ranks, ", numNodes(), " node(s), path ",
           nameOf(options_.path), team_ ? ", shared memory available" : "");

  const bool raise = options_.raiseOnPeerLoss && !options_.onPeerLost;
  progress_ = std::make_unique<ProgressThread>(
      "zrt-comm", [this](const Collective& op, std::uint64_t seq) { runOp(op, seq); }, stats_,
      !raise);
  auto onPeerLost = options_.onPeerLost;
  if (raise) {
    // Called on the watchdog's thread, once per communicator (each lane's watchdog fails its
    // own lane's waits).
    onPeerLost = [this](const std::string& report) {
      logError(detail::cat(report, "; raising PeerError in the waits on this communicator"));
      notePeerLoss(report);
      progress_->abandon(std::make_exception_ptr(PeerError(report)));
    };
  }
  // A wait that gave up (ZRT_WAIT_TIMEOUT_S before the watchdog's timeout) leaves its operation
  // blocked for good, as a lost peer does: the teardown must not wait for it, or the process
  // would outlive its TimeoutError until the watchdog ends the job. The communicator is
  // abandoned the same way, and the process ends on the error without MPI_Finalize.
  progress_->setOnWaitTimeout([this](const std::string& report) {
    logError(detail::cat(report, "; abandoning this communicator (no collective teardown)"));
    notePeerLoss(report);
    progress_->abandon(std::make_exception_ptr(TimeoutError(report)));
  });
  watchdog_ = std::make_unique<Watchdog>(opComm_.get(), *progress_, options_.timeout,
                                         options_.divergenceTimeout, options_.onTimeout,
                                         std::move(onPeerLost));
}

MpiCommunicator::~MpiCommunicator() {
  if (progress_->abandoned()) {
    // Its thread is still in the operation the lost peer never joins, using the progress thread,
    // the shared-memory team and the scratch buffer: they are left behind (the process is
    // ending); the MPI handles are not freed (left_peers.h skips every collective free now).
    watchdog_.reset();
    (void)progress_.release();
    (void)team_.release();
    (void)new std::vector<char>(std::move(scratch_));
    return;
  }
  progress_->drain();  // finishes queued operations while the watchdog still guards them
  watchdog_.reset();   // before the progress thread it watches
  progress_.reset();
}

CommBuffer MpiCommunicator::allocateBuffer(std::size_t bytes) {
  return team_ ? team_->allocateRegion(bytes) : CommBuffer::host(bytes);
}

int MpiCommunicator::numNodes() const { return team_ ? team_->numNodes() : nodes_; }

CommPath MpiCommunicator::pathFor(const Collective& op) const {
  if (!team_ || options_.path == CommPath::Mpi) return CommPath::Mpi;
  if (op.kind == OpKind::Broadcast || op.kind == OpKind::Barrier) return CommPath::Mpi;
  if (options_.path == CommPath::Shm) return CommPath::Shm;
  return opBytes(op) >= options_.shmMinBytes ? CommPath::Shm : CommPath::Mpi;
}

std::string_view MpiCommunicator::pathName(const Collective& op) const {
  const CommPath path = pathFor(op);
  if (path == CommPath::Shm && team_->numNodes() > 1) return "shm+mpi";
  return nameOf(path);
}

void MpiCommunicator::failIfPeerLost() const {
  // A peer lost on another lane (or another communicator) is lost to this one too: an
  // operation posted now would block for good before this lane's watchdog noticed.
  if (options_.raiseOnPeerLoss && peerLost())
    ZRT_THROW(PeerError, "a peer was lost earlier: ", peerLossReport());
}

Work MpiCommunicator::post(Collective op) {
  failIfPeerLost();
  validate(op, rank_, size_);
  const std::string_view name = pathName(op);
  return progress_->enqueue(std::move(op), name);
}

void MpiCommunicator::run(Collective op) {
  failIfPeerLost();
  validate(op, rank_, size_);
  const std::string_view name = pathName(op);
  progress_->runBlocking(std::move(op), name);
}

void MpiCommunicator::runOp(const Collective& op, std::uint64_t seq) {
  if (options_.checkConsistency) checkConsistency(op, seq);
  if (pathFor(op) == CommPath::Mpi) return runMpi(op);
  const std::string what = detail::cat(describe(op), " #", seq);
  // Barriers give up a little after the watchdog would have reported, in case onTimeout
  // was replaced and returned.
  const ShmContext ctx{*team_, ops_,
                       std::chrono::steady_clock::now() + watchdog_->timeout() + std::chrono::seconds(5),
                       what.c_str(), options_.maxMpiCount};
  switch (op.kind) {
    case OpKind::AllReduce: return shmAllReduce(ctx, op);
    case OpKind::ReduceScatter: return shmReduceScatter(ctx, op);
    case OpKind::AllGather: return shmAllGather(ctx, op);
    default: return runMpi(op);
  }
}

void MpiCommunicator::checkConsistency(const Collective& op, std::uint64_t seq) {
  const Signature mine{seq,
                       static_cast<std::uint64_t>(op.kind),
                       static_cast<std::uint64_t>(op.dtype),
                       totalCount(op),
                       shapeHash(op),
                       static_cast<std::uint64_t>(op.kind == OpKind::Broadcast ? op.root : 0)};
  std::vector<Signature> all(static_cast<std::size_t>(size_));
  ZRT_CHECK_MPI(MPI_Allgather(&mine, 6, MPI_UINT64_T, all.data(), 6, MPI_UINT64_T,
                              checkComm_.get()));
  auto text = [](const Signature& s) {
    Collective c;
    c.kind = static_cast<OpKind>(s.kind);
    c.dtype = static_cast<DType>(s.dtype);
    c.count = s.total;
    return detail::cat(describe(c), " (", s.total, " elements",
                       c.kind == OpKind::Broadcast ? detail::cat(", root ", s.root) : "", ")");
  };
  std::string differ;
  const Signature& ref = all[0];
  for (int r = 1; r < size_; ++r) {
    const Signature& s = all[static_cast<std::size_t>(r)];
    if (s.kind == ref.kind && s.dtype == ref.dtype && s.total == ref.total && s.root == ref.root &&
        s.shape == ref.shape)
      continue;
    differ += detail::cat("\n  rank ", r, " posted ", text(s));
    if (s.kind == ref.kind && s.total == ref.total && s.dtype == ref.dtype && s.root == ref.root)
      differ += " with different per-rank counts or displacements";
  }
  if (!differ.empty())
    ZRT_THROW(PeerError, "ranks disagree on collective #", seq, ":\n  rank 0 posted ", text(ref),
              differ);
}

void MpiCommunicator::runMpi(const Collective& op) {
  const MpiTarget t = mpiTarget(opComm_.get(), op.dtype);
  const MPI_Op sum = ops_.sum(op.dtype);
  switch (op.kind) {
    case OpKind::Barrier: ZRT_CHECK_MPI(MPI_Barrier(t.comm)); return;
    case OpKind::AllReduce: return mpiAllReduce(t, sum, op.send, op.recv, op.count);
    case OpKind::Broadcast: return mpiBroadcast(t, op.recv, op.count, op.root);
    case OpKind::ReduceScatter:
      return mpiReduceScatter(t, sum, op.send, op.recv, op.counts, rank_, scratch_);
    case OpKind::AllGather: {
      std::vector<std::size_t> displs(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) displs[static_cast<std::size_t>(r)] = segmentOffset(op, r);
      return mpiAllGather(t, op.send, op.recv, op.counts, displs, rank_);
    }
  }
}

MpiTarget MpiCommunicator::mpiTarget(MPI_Comm comm, DType dtype) const {
  return MpiTarget{comm, MpiReduceOps::datatype(dtype), dtypeSize(dtype), options_.maxMpiCount};
}

InFlight MpiCommunicator::inFlight() const { return progress_->inFlight(); }

void MpiCommunicator::setTimeout(std::chrono::milliseconds timeout) {
  // options_ is the owner's (what duplicate() copies); the progress thread reads the watchdog's.
  options_.timeout = timeout;
  watchdog_->setTimeout(timeout);
}

void MpiCommunicator::setDivergenceTimeout(std::chrono::milliseconds bound) {
  options_.divergenceTimeout = bound;
  watchdog_->setDivergenceTimeout(bound);
}

std::unique_ptr<Communicator> MpiCommunicator::duplicate() {
  // laneComm_ carries no operation, so duplicating it on the caller's thread cannot interleave
  // with a collective the progress thread runs on opComm_.
  return std::make_unique<MpiCommunicator>(laneComm_.get(), options_);
}

}  // namespace zrt::comm
