#include "comm/threads/thread_world.h"

#include <cstring>
#include <exception>
#include <thread>

#include "comm/progress_thread.h"
#include "core/element_arithmetic.h"
#include "core/error.h"

namespace zrt::comm {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadWorld& world, int rank)
      : world_(world),
        rank_(rank),
        stats_(world.size()),
        progress_(detail::cat("zrt-thr", rank), [this](const Collective& op, std::uint64_t seq) {
          runOp(op, seq);
        }, stats_) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::string backendName() const override { return "threads"; }
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }

  Work post(Collective op) override {
    validate(op, rank_, size());
    return progress_.enqueue(std::move(op), "threads");
  }

 private:
  void runOp(const Collective& op, std::uint64_t seq) {
    const std::string what = detail::cat(describe(op), " #", seq);
    world_.posted_[static_cast<std::size_t>(rank_)] = ThreadWorld::Posted{&op, seq};
    world_.barrier(rank_, what);  // every rank posted: its buffers may be read
    std::string bad = world_.mismatch();
    if (bad.empty()) gather(op);
    world_.barrier(rank_, what);  // every rank finished reading its peers' buffers
    if (!bad.empty()) ZRT_THROW(PeerError, bad);
    scatter(op);
  }

  // Reads what this rank needs from every peer into temp_.
  void gather(const Collective& op) {
    const std::size_t es = dtypeSize(op.dtype);
    const int n = size();
    std::vector<const void*> srcs(static_cast<std::size_t>(n));
    auto peer = [&](int r) -> const Collective& { return *world_.posted_[static_cast<std::size_t>(r)].op; };
    switch (op.kind) {
      case OpKind::Barrier: return;
      case OpKind::AllReduce:
        temp_.resize(op.count * es);
        for (int r = 0; r < n; ++r) srcs[static_cast<std::size_t>(r)] = peer(r).send;
        sumInto(op.dtype, temp_.data(), srcs.data(), n, op.count);
        return;
      case OpKind::ReduceScatter: {
        const std::size_t mine = op.counts[static_cast<std::size_t>(rank_)];
        const std::size_t off = segmentOffset(op, rank_) * es;
        temp_.resize(mine * es);
        for (int r = 0; r < n; ++r)
          srcs[static_cast<std::size_t>(r)] = static_cast<const char*>(peer(r).send) + off;
        sumInto(op.dtype, temp_.data(), srcs.data(), n, mine);
        return;
      }
      case OpKind::AllGather: {
        temp_.resize(totalCount(op) * es);
        std::size_t at = 0;
        for (int r = 0; r < n; ++r) {
          const std::size_t bytes = op.counts[static_cast<std::size_t>(r)] * es;
          if (bytes) std::memcpy(temp_.data() + at, peer(r).send, bytes);
          at += bytes;
        }
        return;
      }
      case OpKind::Broadcast:
        temp_.resize(op.count * es);
        if (op.count) std::memcpy(temp_.data(), peer(op.root).recv, op.count * es);
        return;
    }
  }

  // Writes this rank's outputs; no peer reads this rank's buffers any more.
  void scatter(const Collective& op) {
    const std::size_t es = dtypeSize(op.dtype);
    switch (op.kind) {
      case OpKind::Barrier: return;
      case OpKind::AllReduce:
      case OpKind::ReduceScatter:
        if (!temp_.empty()) std::memcpy(op.recv, temp_.data(), temp_.size());
        return;
      case OpKind::AllGather: {
        std::size_t at = 0;
        for (int r = 0; r < size(); ++r) {
          const std::size_t bytes = op.counts[static_cast<std::size_t>(r)] * es;
          if (bytes && r != rank_)
            std::memcpy(static_cast<char*>(op.recv) + segmentOffset(op, r) * es,
                        temp_.data() + at, bytes);
          else if (bytes && !isInPlace(op, rank_))
            std::memcpy(static_cast<char*>(op.recv) + segmentOffset(op, r) * es, op.send, bytes);
          at += bytes;
        }
        return;
      }
      case OpKind::Broadcast:
        if (rank_ != op.root && op.count) std::memcpy(op.recv, temp_.data(), temp_.size());
        return;
    }
  }

  ThreadWorld& world_;
  const int rank_;
  std::vector<char> temp_;
  CommStats stats_;
  ProgressThread progress_;  // Last: its thread calls runOp, which uses the members above.
};

ThreadWorld::ThreadWorld(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout) {
  if (size < 1) ZRT_THROW(InvalidArgument, "a thread world needs at least 1 rank, got ", size);
  arrived_.assign(static_cast<std::size_t>(size), false);
  posted_.resize(static_cast<std::size_t>(size));
}

std::unique_ptr<Communicator> ThreadWorld::connect(int rank) {
  if (rank < 0 || rank >= size_)
    ZRT_THROW(InvalidArgument, "rank ", rank, " outside a thread world of ", size_);
  return std::make_unique<ThreadCommunicator>(*this, rank);
}

void ThreadWorld::barrier(int rank, const std::string& what) {
  std::unique_lock lock(mu_);
  if (!broken_.empty()) ZRT_THROW(PeerError, what, ": ", broken_);
  const std::uint64_t gen = generation_;
  arrived_[static_cast<std::size_t>(rank)] = true;
  if (++arrivedCount_ == size_) {
    arrivedCount_ = 0;
    arrived_.assign(arrived_.size(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  // Waits for the last rank to arrive at this barrier (or for another rank to give up).
  const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || !broken_.empty(); });
  if (done && generation_ != gen) return;
  if (!broken_.empty()) ZRT_THROW(PeerError, what, ": ", broken_);
  std::string missing;
  for (int r = 0; r < size_; ++r)
    if (!arrived_[static_cast<std::size_t>(r)]) missing += detail::cat(missing.empty() ? "" : ", ", r);
  broken_ = detail::cat("rank ", rank, " gave up waiting in ", what, " after ",
                        static_cast<double>(timeout_.count()) / 1000.0,
                        " s; ranks that had not arrived: ", missing);
  cv_.notify_all();
  ZRT_THROW(TimeoutError, what, " did not complete within ",
            static_cast<double>(timeout_.count()) / 1000.0, " s on rank ", rank,
            "; ranks that had not arrived: ", missing);
}

std::string ThreadWorld::mismatch() const {
  const Collective& a = *posted_[0].op;
  for (int r = 1; r < size_; ++r) {
    const Collective& b = *posted_[static_cast<std::size_t>(r)].op;
    const bool same = a.kind == b.kind && a.dtype == b.dtype &&
                      (a.kind == OpKind::Barrier ||
                       (a.count == b.count && a.counts == b.counts && a.root == b.root &&
                        (a.kind != OpKind::AllGather ||
                         recvExtent(a) == recvExtent(b))));
    if (!same)
      return detail::cat("ranks disagree on collective #", posted_[0].seq, ": rank 0 posted ",
                         describe(a), ", rank ", r, " posted ", describe(b));
  }
  return "";
}

void ThreadWorld::run(int size, const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout) {
  ThreadWorld world(size, timeout);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = world.connect(r);
        body(*comm);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[static_cast<std::size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const std::exception& e) {
      ZRT_THROW(Error, "thread rank ", r, " failed: ", e.what());
    }
  }
}

}  // namespace zrt::comm
