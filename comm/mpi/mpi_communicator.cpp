#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/mpi/watchdog.h"
#include "comm/mpi_check.h"
#include "comm/progress_thread.h"
#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_team.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace zrt::comm {
namespace {

constexpr std::size_t kMaxChunk = std::size_t{1} << 30;  // elements per MPI call (int counts)

// MPI counts are ints: each value, and for counts their sum, must fit.
std::vector<int> intCounts(const std::vector<std::size_t>& v, const char* what,
                           const Collective& op, bool sumMustFit = true) {
  std::vector<int> out(v.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    total += sumMustFit ? v[i] : 0;
    if (v[i] > static_cast<std::size_t>(INT_MAX) || total > static_cast<std::size_t>(INT_MAX))
      ZRT_THROW(InvalidArgument, describe(op), ": ", what, " exceed MPI's int counts (",
                INT_MAX, " elements); use smaller buckets");
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}

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
  opComm_ = MpiCommHandle::dup(comm);
  checkComm_ = MpiCommHandle::dup(comm);
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

  progress_ = std::make_unique<ProgressThread>(
      "zrt-comm", [this](const Collective& op, std::uint64_t seq) { runOp(op, seq); }, stats_);
  watchdog_ = std::make_unique<Watchdog>(opComm_.get(), *progress_, options_.timeout,
                                         options_.onTimeout);
}

MpiCommunicator::~MpiCommunicator() {
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

Work MpiCommunicator::post(Collective op) {
  validate(op, rank_, size_);
  const std::string_view name = pathName(op);
  return progress_->enqueue(std::move(op), name);
}

void MpiCommunicator::run(Collective op) {
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
                       std::chrono::steady_clock::now() + options_.timeout + std::chrono::seconds(5),
                       what.c_str()};
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
  MPI_Comm comm = opComm_.get();
  const MPI_Datatype type = MpiReduceOps::datatype(op.dtype);
  const std::size_t es = dtypeSize(op.dtype);
  const auto* in = static_cast<const char*>(op.send);
  auto* out = static_cast<char*>(op.recv);
  switch (op.kind) {
    case OpKind::Barrier: ZRT_CHECK_MPI(MPI_Barrier(comm)); return;
    case OpKind::AllReduce:
      for (std::size_t off = 0; off < op.count; off += kMaxChunk) {
        const int n = static_cast<int>(std::min(kMaxChunk, op.count - off));
        ZRT_CHECK_MPI(MPI_Allreduce(op.send == op.recv ? MPI_IN_PLACE : in + off * es,
                                    out + off * es, n, type, ops_.sum(op.dtype), comm));
      }
      return;
    case OpKind::Broadcast:
      for (std::size_t off = 0; off < op.count; off += kMaxChunk) {
        const int n = static_cast<int>(std::min(kMaxChunk, op.count - off));
        ZRT_CHECK_MPI(MPI_Bcast(out + off * es, n, type, op.root, comm));
      }
      return;
    case OpKind::ReduceScatter: {
      const std::vector<int> counts = intCounts(op.counts, "per-rank counts", op);
      const std::size_t mine = op.counts[static_cast<std::size_t>(rank_)];
      if (isInPlace(op, rank_) && mine > 0) {
        // MPI_IN_PLACE would leave the result at the start of the buffer and may use the rest
        // as workspace; receive into scratch and keep the other segments untouched instead.
        scratch_.resize(mine * es);
        ZRT_CHECK_MPI(MPI_Reduce_scatter(in, scratch_.data(), counts.data(), type,
                                         ops_.sum(op.dtype), comm));
        std::memcpy(out, scratch_.data(), mine * es);
      } else {
        const bool equal = std::all_of(counts.begin(), counts.end(),
                                       [&](int c) { return c == counts[0]; });
        if (equal)
          ZRT_CHECK_MPI(MPI_Reduce_scatter_block(in, out, counts[0], type, ops_.sum(op.dtype), comm));
        else
          ZRT_CHECK_MPI(MPI_Reduce_scatter(in, out, counts.data(), type, ops_.sum(op.dtype), comm));
      }
      return;
    }
    case OpKind::AllGather: {
      const std::vector<int> counts = intCounts(op.counts, "per-rank counts", op);
      const bool inPlace = isInPlace(op, rank_);
      const bool equal =
          op.displs.empty() &&
          std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; });
      if (equal) {
        ZRT_CHECK_MPI(MPI_Allgather(inPlace ? MPI_IN_PLACE : op.send, counts[0], type, out,
                                    counts[0], type, comm));
        return;
      }
      std::vector<std::size_t> d(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) d[static_cast<std::size_t>(r)] = segmentOffset(op, r);
      const std::vector<int> displs = intCounts(d, "displacements", op, false);
      ZRT_CHECK_MPI(MPI_Allgatherv(inPlace ? MPI_IN_PLACE : op.send,
                                   counts[static_cast<std::size_t>(rank_)], type, out,
                                   counts.data(), displs.data(), type, comm));
      return;
    }
  }
}

}  // namespace zrt::comm
