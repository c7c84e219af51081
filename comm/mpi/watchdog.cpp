#include "comm/mpi/watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/caller_label.h"
#include "comm/mpi/peer_loss.h"
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
constexpr int kTagFarewell = 3;
constexpr int kTagDiverged = 4;
constexpr auto kPollPeriod = std::chrono::milliseconds(20);
// The divergence probe: an operation that has waited this long is probed, and again as often.
constexpr auto kProbePeriod = std::chrono::milliseconds(1000);
constexpr int kNoticeBytes = 8192;

void copyText(char (&out)[512], const std::string& text) {
  const std::size_t n = std::min(text.size(), sizeof out - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

std::string textOf(const char (&in)[512]) { return std::string(in, strnlen(in, sizeof in)); }

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
                   std::chrono::milliseconds divergenceTimeout,
                   std::function<void(const std::string&)> onTimeout,
                   std::function<void(const std::string&)> onPeerLost)
    : ctl_(MpiCommHandle::dup(comm)),
      progress_(progress),
      timeoutMs_(timeout.count()),
      divergenceMs_(0),
      onTimeout_(std::move(onTimeout)),
      onPeerLost_(std::move(onPeerLost)) {
  ZRT_CHECK_MPI(MPI_Comm_rank(ctl_.get(), &rank_));
  ZRT_CHECK_MPI(MPI_Comm_size(ctl_.get(), &size_));
  peers_ = std::make_unique<PeerLiveness>(ctl_.get());
  worldRanks_ = worldRanksOf(ctl_.get(), size_);
  lastWords_ = std::make_unique<TerminationReportSlot>(*peers_, worldRanks_);
  setDivergenceTimeout(divergenceTimeout);
  farewells_.resize(static_cast<std::size_t>(size_));
  cycles_.resize(static_cast<std::size_t>(size_));
  noticeIn_.resize(kNoticeBytes);
  if (size_ > 1) {
    query_ = MpiRequest::irecv(&queryIn_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagQuery, ctl_.get());
    farewell_ = MpiRequest::irecv(&farewellIn_, sizeof farewellIn_, MPI_BYTE, MPI_ANY_SOURCE,
                                  kTagFarewell, ctl_.get());
    notice_ = MpiRequest::irecv(noticeIn_.data(), kNoticeBytes, MPI_CHAR, MPI_ANY_SOURCE,
                                kTagDiverged, ctl_.get());
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  sayFarewell();
  setDivergenceTimeout(std::chrono::milliseconds(0));
  // The pending receives are cancelled; replies are a few bytes that go out eagerly, so their
  // sends complete locally (each release waits a bounded time).
  query_.reset();
  farewell_.reset();
  notice_.reset();
  sends_.clear();
  // Not freed: a peer may still send here (its farewell, a question, a divergence notice) after
  // this rank is done, and Open MPI hands a freed communicator's context id to a later one,
  // whose matching such a stray message derails (hangs, and crashes in mca_pml_ob1_add_comm,
  // under ASan). Kept, it only queues them; MPI_Finalize frees it.
  (void)ctl_.release();
}

void Watchdog::setDivergenceTimeout(std::chrono::milliseconds bound) {
  std::lock_guard lock(trackMu_);
  divergenceMs_.store(bound.count());
  const bool on = bound.count() > 0 && size_ > 1;
  if (on != tracking_) CallerLabel::trackActivity(on ? 1 : -1);
  tracking_ = on;
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
      receiveNotices();
      const ProgressThread::Snapshot snap = progress_.snapshot();
      publishSnapshot(snap);
      checkPeers(snap);
      if (onPeerLost_ && snap.running && !divergedReported_ && !peerLostReported_ && peerLost()) {
        // Another communicator of this process lost a peer or found the ranks diverged: this
        // one's wait will not complete either (the gather lane's, beside a step's collective).
        divergedReported_ = true;
        onPeerLost_(peerLossReport());
      }
      probe(snap);
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
    auto reply = std::make_unique<Reply>();
    reply->data = ownState(queryIn_);
    reply->req = MpiRequest::isend(&reply->data, sizeof reply->data, MPI_BYTE, status.MPI_SOURCE,
                                   kTagReply, ctl_.get());
    sends_.push_back(std::move(reply));
    query_ = MpiRequest::irecv(&queryIn_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagQuery, ctl_.get());
  }
  reapSends();
}

void Watchdog::reapSends() {
  std::erase_if(sends_, [](const std::unique_ptr<Reply>& r) { return r->req.test(); });
}

Watchdog::PeerState Watchdog::ownState(std::uint64_t query) const {
  const ProgressThread::Snapshot s = progress_.snapshot();
  const CallerLabel::Activity a = CallerLabel::activity();
  PeerState out;
  out.query = query;
  out.issued = s.issued;
  out.started = s.started;
  out.completed = s.completed;
  out.running = s.running ? 1 : 0;
  out.kind = static_cast<std::uint64_t>(s.kind);
  out.bytes = s.bytes;
  out.inCall = a.inCall ? 1 : 0;
  out.callKind = static_cast<std::uint64_t>(a.kind);
  out.millis = static_cast<std::uint64_t>(a.seconds * 1000);
  out.blockedLane = static_cast<std::uint64_t>(a.blockedLane + 1);
  out.blockedSeq = a.blockedSeq;
  out.blockedMillis = static_cast<std::uint64_t>(a.blockedSeconds * 1000);
  copyText(out.text, a.text);
  return out;
}

std::vector<std::optional<Watchdog::PeerState>> Watchdog::askPeers(std::chrono::milliseconds wait) {
  const std::uint64_t query = ++queries_;
  // The buffers first: the requests that use them are released before them, even on a throw.
  std::vector<PeerState> replies(static_cast<std::size_t>(size_));
  std::vector<std::uint64_t> question(static_cast<std::size_t>(size_), query);
  std::vector<MpiRequest> recvs(static_cast<std::size_t>(size_));
  std::vector<MpiRequest> queries(static_cast<std::size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto u = static_cast<std::size_t>(p);
    recvs[u] = MpiRequest::irecv(&replies[u], sizeof(PeerState), MPI_BYTE, p, kTagReply, ctl_.get());
    queries[u] = MpiRequest::isend(&question[u], 1, MPI_UINT64_T, p, kTagQuery, ctl_.get());
  }
  // Peers' watchdogs poll every 20 ms.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<std::optional<PeerState>> out(static_cast<std::size_t>(size_));
  std::vector<bool> answered(static_cast<std::size_t>(size_), false);
  answered[static_cast<std::size_t>(rank_)] = true;
  for (;;) {
    bool all = true;
    for (int p = 0; p < size_; ++p) {
      const auto u = static_cast<std::size_t>(p);
      if (answered[u]) continue;
      if (recvs[u].test()) {
        if (replies[u].query == query) {
          answered[u] = true;
          out[u] = replies[u];
        } else {  // a late answer to an earlier question: wait for this one's
          recvs[u] = MpiRequest::irecv(&replies[u], sizeof(PeerState), MPI_BYTE, p, kTagReply,
                                       ctl_.get());
        }
      }
      all = all && answered[u];
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    answerQueries();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  recvs.clear();  // the unanswered ones are cancelled
  // A query to a peer that is gone may never complete: each release waits a bounded time.
  queries.clear();
  return out;
}

std::string Watchdog::diagnose(const ProgressThread::Snapshot& op) {
  const std::uint64_t seq = op.started;
  // Waits for the peers' answers for up to a few seconds.
  const std::chrono::milliseconds limit = timeout();
  const auto answerWait = std::clamp(limit, std::chrono::milliseconds(1000),
                                     std::chrono::milliseconds(5000));
  const std::vector<std::optional<PeerState>> answers = askPeers(answerWait);

  std::string notArrived, lines;
  for (int p = 0; p < size_; ++p) {
    const auto u = static_cast<std::size_t>(p);
    std::string line;
    if (p == rank_) {
      line = detail::cat("rank ", p, ": running ", op.work->description(), " for ",
                         fmt1(secondsSince(op.since)), " s");
      if (const auto& caller = op.work->caller()) line += ", posted in " + *caller;
    } else if (!answers[u]) {
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
      const PeerState& r = *answers[u];
      const std::uint64_t issued = r.issued, started = r.started, completed = r.completed;
      const bool running = r.running != 0;
      const auto kind = static_cast<OpKind>(r.kind);
      if (started < seq) {
        notArrived += detail::cat(notArrived.empty() ? "" : ", ", p);
        line = detail::cat("rank ", p, ": not arrived: has posted ", issued,
                           " collective(s), finished ", completed);
        if (running) line += detail::cat(", running #", started, " (", nameOf(kind), ")");
        else if (issued < seq) line += ", and is not in a collective";
      } else if (started == seq && running && (kind != op.kind || r.bytes != op.bytes)) {
        line = detail::cat("rank ", p, ": in a different collective at #", seq, ": ",
                           nameOf(kind), " of ", r.bytes, " bytes (the ranks diverged)");
      } else {
        line = detail::cat("rank ", p, ": arrived (started #", started, ", finished ", completed,
                           ")");
      }
    }
    if (p != rank_ && answers[u] && answers[u]->text[0])
      line += detail::cat(answers[u]->inCall ? "; in " : "; in no ZRT call since ",
                          textOf(answers[u]->text));
    lines += "\n  " + line;
  }
  return detail::cat("collective timeout: ", op.work->description(), " (", op.bytes,
                     " bytes) has not completed after ", fmt1(secondsSince(op.since)),
                     " s on rank ", rank_, " (timeout ", fmt1(limit.count() / 1000.0),
                     " s); ranks that had not arrived: ", notArrived.empty() ? "none" : notArrived,
                     lines);
}

void Watchdog::probe(const ProgressThread::Snapshot& op) {
  const auto bound = std::chrono::milliseconds(divergenceMs_.load());
  if (divergedReported_ || bound.count() == 0 || size_ < 2 || !op.running) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - op.since < kProbePeriod) return;
  if (probedSeq_ == op.started && now - probedAt_ < kProbePeriod) return;
  probedSeq_ = op.started;
  probedAt_ = now;
  const auto answers = askPeers(kProbePeriod);
  if (progress_.snapshot().completed >= op.started) return;  // it finished meanwhile
  const std::string report = divergence(op, answers);
  if (!report.empty()) diverged(report, true);
}

std::string Watchdog::waitsOnThisRank(int p, const PeerState& peer, const CallerLabel::Activity& mine) {
  // Both callers blocked, each for an operation the other has not posted: neither can post what
  // the other waits for (the save on rank 0 alone at stage 3: its collective on the main lane,
  // the peer's next forward gathering on the gather lane).
  auto& seen = cycles_[static_cast<std::size_t>(p)];
  const std::array<std::uint64_t, 4> none{};
  if (peer.blockedLane == 0 || peer.blockedMillis < 1000 || mine.blockedLane < 0) {
    seen = none;
    return {};
  }
  const int lane = static_cast<int>(peer.blockedLane) - 1;
  const std::optional<std::uint64_t> posted = ProgressThread::issuedOn(lane);
  if (lane == progress_.lane() || !posted || *posted >= peer.blockedSeq) {
    seen = none;
    return {};
  }
  // A thread of either rank other than the blocked one could still post: only a cycle that
  // stays the same for a probe period counts.
  const std::array<std::uint64_t, 4> cycle{peer.blockedLane, peer.blockedSeq, *posted, peer.issued};
  if (seen != cycle) {
    seen = cycle;
    return {};
  }
  return detail::cat(", blocked ", fmt1(static_cast<double>(peer.blockedMillis) / 1000.0),
                     " s for operation #", peer.blockedSeq, " of another communicator (lane ", lane,
                     "), which this rank has not posted (", *posted, " posted there)");
}

std::string Watchdog::divergence(const ProgressThread::Snapshot& op,
                                 const std::vector<std::optional<PeerState>>& peers) {
  const std::uint64_t seq = op.started;
  const double bound = static_cast<double>(divergenceMs_.load()) / 1000.0;
  const CallerLabel::Activity mine = CallerLabel::activity();
  const bool closingHere = mine.inCall && mine.kind == CallKind::Closing;
  // What a peer is doing matters only while this rank's caller waits: an operation in flight
  // behind a caller that computes on (a prefetch) may still meet a peer that is elsewhere now.
  const bool stuckHere = mine.blockedLane >= 0;
  auto call = [](const std::string& text) { return text.empty() ? std::string("no ZRT call") : text; };
  std::string lines = detail::cat("\n  rank ", rank_, " waits in ", call(mine.text), " (",
                                  op.work->description(), ", ", fmt1(secondsSince(op.since)), " s)");
  bool diverged = false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto u = static_cast<std::size_t>(p);
    std::string line;
    if (!peers[u]) {
      if (const auto& bye = farewells_[u]; bye && bye->issued < seq) {
        diverged = true;
        line = detail::cat("rank ", p, " has closed this communicator after posting ", bye->issued,
                           " operation(s), in ", call(textOf(bye->text)), ": it will not post #", seq);
      } else {
        line = detail::cat("rank ", p, " did not answer (its watchdog may be stopped or gone)");
      }
    } else {
      const PeerState& r = *peers[u];
      const std::string text = call(textOf(r.text));
      const auto kind = static_cast<CallKind>(r.callKind);
      const double seconds = static_cast<double>(r.millis) / 1000.0;
      if (r.started == seq && r.running &&
          (static_cast<OpKind>(r.kind) != op.kind || r.bytes != op.bytes)) {
        diverged = true;
        line = detail::cat("rank ", p, " waits in ", text, " (", nameOf(static_cast<OpKind>(r.kind)),
                           " of ", r.bytes, " bytes as #", seq, ": a different collective)");
      } else if (r.issued >= seq) {
        line = detail::cat("rank ", p, " is in ", text, " and has posted #", seq);
      } else if (stuckHere && r.inCall && kind == CallKind::Closing && !closingHere) {
        diverged = true;
        line = detail::cat("rank ", p, " is closing: ", text, " (", r.issued,
                           " operation(s) posted on this communicator)");
      } else if (stuckHere && r.inCall && kind == CallKind::WaitsElsewhere && seconds >= 1.0) {
        diverged = true;
        line = detail::cat("rank ", p, " waits in ", text, " for ", fmt1(seconds),
                           " s, a collective outside this communicator");
      } else if (const std::string cycle = waitsOnThisRank(p, r, mine); !cycle.empty()) {
        diverged = true;
        line = detail::cat("rank ", p, " waits in ", text, cycle);
      } else if (stuckHere && !r.inCall && r.text[0] && seconds > bound) {  // no labels: unknown
        diverged = true;
        line = detail::cat("rank ", p, " has been in no ZRT call for ", fmt1(seconds),
                           " s (the last: ", text, "), more than zrt.divergence_timeout_s (",
                           fmt1(bound), " s)");
      } else {
        line = detail::cat("rank ", p, r.inCall ? " is in " : " is in no ZRT call since ", text,
                           ", on its way");
      }
    }
    lines += "\n  " + line;
  }
  if (!diverged) return {};
  return detail::cat("ranks diverged: rank ", rank_, "'s ", op.work->description(),
                     " waits for ranks that are not on their way to it; each rank's ZRT call:",
                     lines);
}

void Watchdog::diverged(const std::string& report, bool tellPeers) {
  divergedReported_ = true;
  if (tellPeers) {
    // Every peer's watchdog hands it on too, so ranks in no wait (or in another
    // communicator's) end as well. Eager: a few KiB to each; each release waits bounded.
    const std::string text = report.substr(0, kNoticeBytes - 1);
    std::vector<MpiRequest> sends;
    for (int p = 0; p < size_; ++p)
      if (p != rank_)
        sends.push_back(MpiRequest::isend(text.c_str(), static_cast<int>(text.size() + 1), MPI_CHAR,
                                          p, kTagDiverged, ctl_.get()));
    for (auto& s : sends)
      for (int i = 0; i < 100 && !s.test(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (onPeerLost_) {
    onPeerLost_(report);
  } else if (lastWords_->claimLossReport()) {
    abortJob(report + "\nending the job (zrt.divergence_timeout_s = 0 turns this check off)");
  }
}

void Watchdog::receiveNotices() {
  if (farewell_.pending()) {
    MPI_Status status;
    while (farewell_.test(&status)) {
      farewells_[static_cast<std::size_t>(status.MPI_SOURCE)] = farewellIn_;
      farewell_ = MpiRequest::irecv(&farewellIn_, sizeof farewellIn_, MPI_BYTE, MPI_ANY_SOURCE,
                                    kTagFarewell, ctl_.get());
    }
  }
  if (notice_.pending()) {
    MPI_Status status;
    if (notice_.test(&status)) {
      noticeIn_.back() = '\0';
      const std::string report(noticeIn_.data());
      if (!divergedReported_ && !peerLost())
        diverged(detail::cat(report, "\n(reported by rank ", status.MPI_SOURCE, ")"), false);
    }
  }
}

void Watchdog::sayFarewell() {
  // Peers are not told when they are lost already, or when this process leaves on an error.
  if (size_ < 2 || peerLost()) return;
  Farewell bye;
  bye.issued = progress_.snapshot().issued;
  copyText(bye.text, CallerLabel::activity().text);
  std::vector<MpiRequest> sends;
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      sends.push_back(MpiRequest::isend(&bye, sizeof bye, MPI_BYTE, p, kTagFarewell, ctl_.get()));
  for (auto& s : sends)
    for (int i = 0; i < 100 && !s.test(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace zrt::comm
