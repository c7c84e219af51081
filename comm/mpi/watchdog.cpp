#include "comm/mpi/watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/termination.h"
#include "core/timing.h"
#include "core/units.h"

namespace zrt::comm {
namespace {

constexpr int kTagQuery = 1;
constexpr int kTagReply = 2;
constexpr auto kPollPeriod = std::chrono::milliseconds(20);

std::string fmt1(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

std::vector<int> worldRanksOf(MPI_Comm comm, int size) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  std::vector<int> local(static_cast<std::size_t>(size)), out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) local[static_cast<std::size_t>(r)] = r;
  ZRT_CHECK_MPI(MPI_Comm_group(comm, &group));
  const int rc1 = MPI_Comm_group(MPI_COMM_WORLD, &world);
  const int rc2 = rc1 == MPI_SUCCESS ? MPI_Group_translate_ranks(group, size, local.data(), world, out.data()) : rc1;
  MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  ZRT_CHECK_MPI(rc2);
  return out;
}

}  // namespace

Watchdog::Watchdog(MPI_Comm comm, const ProgressThread& progress,
                   std::chrono::milliseconds timeout,
                   std::function<void(const std::string&)> onTimeout,
                   std::function<void(const std::string&)> onPeerLost)
    : ctl_(MpiCommHandle::dup(comm)),
      progress_(progress),
      timeoutMs_(timeout.count()),
      onTimeout_(std::move(onTimeout)),
      onPeerLost_(std::move(onPeerLost)) {
  ZRT_CHECK_MPI(MPI_Comm_rank(ctl_.get(), &rank_));
  ZRT_CHECK_MPI(MPI_Comm_size(ctl_.get(), &size_));
  peers_ = std::make_unique<PeerLiveness>(ctl_.get());
  worldRanks_ = worldRanksOf(ctl_.get(), size_);
  lastWords_ = std::make_unique<TerminationReportSlot>(*peers_, worldRanks_);
  if (size_ > 1)
    query_ = MpiRequest::irecv(&queryIn_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagQuery, ctl_.get());
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // The pending query receive is cancelled; replies are a few bytes that go out eagerly, so
  // their sends complete locally (each release waits a bounded time).
  query_.reset();
  sends_.clear();
}

void Watchdog::run() {
  pthread_setname_np(pthread_self(), "zrt-watchdog");
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Sleeps one poll period (or until destruction), then answers peers and checks the clock.
    cv_.wait_for(lock, kPollPeriod, [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    try {
      answerQueries();
      const ProgressThread::Snapshot snap = progress_.snapshot();
      publishSnapshot(snap);
      checkPeers(snap);
      const std::chrono::milliseconds limit = timeout();
      if (snap.running && snap.started != reportedSeq_ &&
          std::chrono::steady_clock::now() - snap.since > limit) {
        reportedSeq_ = snap.started;
        const std::string report = diagnose(snap);
        if (progress_.snapshot().completed >= snap.started) {
          // It finished while the peers were being asked: slow, not stuck.
          logWarning(detail::cat(snap.work->description(), " completed only after the ",
                                 fmt1(limit.count() / 1000.0), " s timeout"));
        } else if (onTimeout_) {
          onTimeout_(report);
        } else {
          abortJob(report);
        }
      }
    } catch (const std::exception& e) {
      logError(detail::cat("comm watchdog: ", e.what()));
    }
    lock.lock();
  }
}

void Watchdog::publishSnapshot(const ProgressThread::Snapshot& snap) {
  if (snap.running == published_.running && snap.started == published_.started &&
      snap.completed == published_.completed)
    return;
  published_ = {snap.running, snap.started, snap.completed};
  lastWords_->publish(snap.running, snap.started, snap.completed,
                      snap.running && snap.work ? snap.work->description() : std::string(), snap.bytes,
                      snap.since);
}

void Watchdog::checkPeers(const ProgressThread::Snapshot& snap) {
  // Only a wait can be lost: a rank between collectives finds out at its next one. A peer that
  // exits normally has finished every collective it was part of.
  if (peerLostReported_ || !snap.running) return;
  const std::vector<int> lost = peers_->exited();
  if (lost.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (lostSeq_ != snap.started) {
    lostSeq_ = snap.started;
    lostSince_ = now;
  }
  // The grace: data a peer sent before exiting may still be arriving for this operation.
  if (now - lostSince_ < std::chrono::seconds(1)) return;
  if (progress_.snapshot().completed >= snap.started) return;
  peerLostReported_ = true;
  std::vector<long> pids;
  std::vector<int> ranks;
  std::vector<const char*> hosts;
  for (int r : lost) {
    ranks.push_back(worldRanks_[static_cast<std::size_t>(r)]);
    pids.push_back(static_cast<long>(peers_->pid(r)));
    hosts.push_back(peers_->otherHost(r) ? peers_->host(r).c_str() : nullptr);
  }
  SignalSafeText t;
  describeLostPeers(t, ranks.data(), pids.data(), hosts.data(), static_cast<int>(lost.size()), true,
                    snap.work->description().c_str(), snap.bytes, secondsSince(snap.since),
                    snap.completed);
  std::string report(t.data, t.size);
  const bool first = lastWords_->claimLossReport();
  if (onPeerLost_) {
    onPeerLost_(report);
  } else if (first) {
    abortJob(report + "; ending the job");
  }
  // else another communicator's watchdog named the loss and is ending the job already.
}

void Watchdog::abortJob(const std::string& report) {
  logError(report);
  lastWords_->markReported();
  // MPI_Abort ends this process without exit handlers: the swap files go first.
  runTerminationHooks(0);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // not reached: MPI_Abort does not return
}

void Watchdog::answerQueries() {
  if (!query_.pending()) return;
  for (;;) {
    MPI_Status status;
    if (!query_.test(&status)) break;
    const ProgressThread::Snapshot s = progress_.snapshot();
    auto reply = std::make_unique<Reply>();
    reply->data[0] = s.issued;
    reply->data[1] = s.started;
    reply->data[2] = s.completed;
    reply->data[3] = s.running ? 1 : 0;
    reply->data[4] = static_cast<std::uint64_t>(s.kind);
    reply->data[5] = s.bytes;
    reply->req = MpiRequest::isend(reply->data, 6, MPI_UINT64_T, status.MPI_SOURCE, kTagReply,
                                   ctl_.get());
    sends_.push_back(std::move(reply));
    query_ = MpiRequest::irecv(&queryIn_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagQuery, ctl_.get());
  }
  reapSends();
}

void Watchdog::reapSends() {
  std::erase_if(sends_, [](const std::unique_ptr<Reply>& r) { return r->req.test(); });
}

std::string Watchdog::diagnose(const ProgressThread::Snapshot& op) {
  const std::uint64_t seq = op.started;
  // The buffers first: the requests that use them are released before them, even on a throw.
  std::vector<std::array<std::uint64_t, 6>> replies(static_cast<std::size_t>(size_));
  std::vector<std::uint64_t> query(static_cast<std::size_t>(size_), seq);
  std::vector<MpiRequest> recvs(static_cast<std::size_t>(size_));
  std::vector<MpiRequest> queries(static_cast<std::size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto u = static_cast<std::size_t>(p);
    recvs[u] = MpiRequest::irecv(replies[u].data(), 6, MPI_UINT64_T, p, kTagReply, ctl_.get());
    queries[u] = MpiRequest::isend(&query[u], 1, MPI_UINT64_T, p, kTagQuery, ctl_.get());
  }
  // Waits for the peers' answers (their watchdogs poll every 20 ms) for up to a few seconds,
  // answering their questions meanwhile: they may be diagnosing the same operation.
  const std::chrono::milliseconds limit = timeout();
  const auto answerWait = std::clamp(limit, std::chrono::milliseconds(1000),
                                     std::chrono::milliseconds(5000));
  const auto deadline = std::chrono::steady_clock::now() + answerWait;
  std::vector<bool> answered(static_cast<std::size_t>(size_), false);
  answered[static_cast<std::size_t>(rank_)] = true;
  for (;;) {
    bool all = true;
    for (int p = 0; p < size_; ++p) {
      const auto u = static_cast<std::size_t>(p);
      if (answered[u]) continue;
      answered[u] = recvs[u].test();
      all = all && answered[u];
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    answerQueries();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  std::string notArrived, lines;
  for (int p = 0; p < size_; ++p) {
    const auto u = static_cast<std::size_t>(p);
    std::string line;
    if (p == rank_) {
      line = detail::cat("rank ", p, ": running ", op.work->description(), " for ",
                         fmt1(secondsSince(op.since)), " s");
      if (const auto& caller = op.work->caller()) line += ", posted in " + *caller;
    } else if (!answered[u]) {
      recvs[u].reset();  // cancelled
      line = detail::cat("rank ", p, ": no answer within ", fmt1(answerWait.count() / 1000.0), " s");
      // A peer on another host may be alive but cut off (a failed link or switch), and its
      // process cannot be watched from here: name the host, so the reader knows where to look.
      if (peers_->host(p) != peers_->host(rank_))
        line += detail::cat(" from host ", peers_->host(p),
                            " (exited, unreachable over the network, or stuck outside ZRT)");
      else
        line += " (exited, or its process is stuck outside ZRT)";
      notArrived += detail::cat(notArrived.empty() ? "" : ", ", p);
    } else {
      const auto& r = replies[u];
      const std::uint64_t issued = r[0], started = r[1], completed = r[2];
      const bool running = r[3] != 0;
      const auto kind = static_cast<OpKind>(r[4]);
      if (started < seq) {
        notArrived += detail::cat(notArrived.empty() ? "" : ", ", p);
        line = detail::cat("rank ", p, ": not arrived: has posted ", issued,
                           " collective(s), finished ", completed);
        if (running) line += detail::cat(", running #", started, " (", nameOf(kind), ")");
        else if (issued < seq) line += ", and is not in a collective";
      } else if (started == seq && running && (kind != op.kind || r[5] != op.bytes)) {
        line = detail::cat("rank ", p, ": in a different collective at #", seq, ": ",
                           nameOf(kind), " of ", r[5], " bytes (the ranks diverged)");
      } else {
        line = detail::cat("rank ", p, ": arrived (started #", started, ", finished ", completed,
                           ")");
      }
    }
    lines += "\n  " + line;
  }
  // A query to a peer that is gone may never complete: each release waits a bounded time.
  queries.clear();
  return detail::cat("collective timeout: ", op.work->description(), " (", op.bytes,
                     " bytes) has not completed after ", fmt1(secondsSince(op.since)),
                     " s on rank ", rank_, " (timeout ", fmt1(limit.count() / 1000.0),
                     " s); ranks that had not arrived: ", notArrived.empty() ? "none" : notArrived,
                     lines);
}

}  // namespace zrt::comm
