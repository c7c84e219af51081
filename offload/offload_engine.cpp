#include "offload/offload_engine.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "offload/aligned_buffer.h"
#include "offload/io_error.h"
#include "offload/null_engine.h"
#include "offload/thread_pool_engine.h"
#include "offload/uring_engine.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timing.h"
#include "core/wait.h"
#include "core/units.h"

namespace zrt::offload {
namespace {

using Clock = std::chrono::steady_clock;
using detail::IoRequest;

// EAGAIN/EINTR answers are sent again this many times before the transfer fails; so are
// transfers that come back having moved nothing.
constexpr int kMaxRetries = 64;
// How long a ring sleeps in reap() before looking around again (it is woken for new work).
constexpr std::chrono::milliseconds kReapSlice{1000};

// One transfer of a request: at most block_size bytes of one stripe.
struct Piece {
  std::shared_ptr<IoRequest> req;
  IoUnit unit;
  std::size_t stripe = 0;
  std::byte* buf = nullptr;      // the piece's memory (the caller's, or the request's tail block)
  std::uint64_t fileOffset = 0;  // where it starts in the stripe's file
  std::size_t len = 0;           // bytes to transfer (a whole padded block for a tail)
  std::size_t need = 0;          // bytes that must arrive (a tail read needs only the tail)
  std::size_t logical = 0;       // caller bytes this piece stands for
  std::size_t done = 0;
  std::size_t align = 1;
  bool direct = false;
  bool tail = false;
  int retries = 0;
  Clock::time_point start;
};

enum class RingState {
  Running,  // taking work or processing completions
  Idle,     // nothing in flight: sleeping on the scheduler's condition variable
  Reaping,  // sleeping in the engine's reap() with free slots: new work must wake() it
};

struct Ring {
  int index = 0;
  std::unique_ptr<IoEngine> engine;
  std::vector<Piece> pieces;   // fixed size: units must not move while queued
  std::vector<Piece*> free;
  std::vector<Piece*> toQueue;    // fresh pieces and resubmissions
  std::vector<Piece*> immediate;  // completed at queue time (QueueResult::Completed)
  std::size_t inEngine = 0;       // queued in the engine, not yet reaped
  RingState state = RingState::Running;  // guarded by the scheduler lock
  bool fixedBuffers = false;
  std::thread thread;

  mutable std::mutex statsMu;
  EngineStats stats;
};

std::unique_ptr<IoEngine> makeEngine(EngineKind kind, std::size_t depth) {
  switch (kind) {
    case EngineKind::IoUring: return makeUringEngine(depth);
    case EngineKind::ThreadPool: return makeThreadPoolEngine(depth);
    case EngineKind::Null: return makeNullEngine(depth);
    case EngineKind::Auto: break;
  }
  ZRT_THROW(Error, "makeEngine: unresolved engine kind");
}

EngineKind resolveKind(EngineKind asked) {
  if (asked == EngineKind::ThreadPool || asked == EngineKind::Null) return asked;
  const int err = probeUring();
  if (err == 0) return EngineKind::IoUring;
  if (asked == EngineKind::IoUring) {
    ZRT_THROW_ERRNO(err, "the io_uring engine was asked for, but this kernel or sandbox refuses "
                         "io_uring: ", std::strerror(err));
  }
  warnOnce("io_uring-fallback",
           zrt::detail::cat("io_uring is not available here (", std::strerror(err),
                       "): using the thread-pool pread/pwrite engine, which costs more CPU "
                       "per transfer"));
  return EngineKind::ThreadPool;
}

std::string totalBytes(const std::vector<iovec>& buffers) {
  std::uint64_t n = 0;
  for (const auto& b : buffers) n += b.iov_len;
  return formatBytes(n);
}

}  // namespace

struct OffloadEngine::Impl {
  AioOptions options;
  EngineKind kind = EngineKind::IoUring;
  std::vector<iovec> fixedBuffers;
  std::vector<std::unique_ptr<Ring>> rings;

  std::mutex mu;  // the scheduler lock
  std::condition_variable workCv;
  std::deque<std::shared_ptr<IoRequest>> queue;
  bool stopping = false;
  std::exception_ptr fatal;  // a ring broke (its engine threw); new requests are refused
  std::condition_variable exitCv;  // a ring thread returned
  std::size_t ringsExited = 0;     // guarded by mu

  // What stats() reports of the queue in use: transfers in the rings, the most at once, and the
  // requests accepted and not finished with when and what they are (the oldest wait).
  std::atomic<std::uint64_t> inFlight{0};
  std::atomic<std::uint64_t> maxInFlight{0};
  mutable std::mutex outstandingMu;  // taken after mu, never before it
  std::uint64_t nextSeq = 0;         // guarded by outstandingMu
  std::map<std::uint64_t, std::pair<Clock::time_point, IoDir>> outstanding;  // by seq

  void retire(const IoRequest& req);
  // What a finished request's `retired` hook does on `ring`: retire it and count it.
  IoRequest::Retired counted(Ring& ring);

  void runRing(Ring& ring, std::promise<void>& ready);
  void loop(Ring& ring);
  void takeLocked(Ring& ring, std::vector<std::shared_ptr<IoRequest>>& exhausted);
  void buildPiece(IoRequest& req, Piece& p) const;
  void queuePieces(Ring& ring);
  void onCompletion(Ring& ring, Piece& p);
  void finish(Ring& ring, Piece& p, std::exception_ptr err);
  std::exception_ptr transferError(const Piece& p, int err, std::string_view what) const;
  void breakRing(Ring& ring, std::exception_ptr err);
  IoHandle submit(IoDir dir, std::shared_ptr<OffloadFile> file, std::uint64_t offset,
                  std::byte* buf, std::size_t len, CompletionCallback cb);
};

// ---------------------------------------------------------------------------------------------
// Ring threads

void OffloadEngine::Impl::runRing(Ring& ring, std::promise<void>& ready) {
  try {
    // The ring is created on the thread that drives it: single-issuer rings insist.
    const auto depth = static_cast<std::size_t>(options.queue_depth);
    ring.engine = makeEngine(kind, depth);
    if (options.wrap_engine) ring.engine = options.wrap_engine(std::move(ring.engine), ring.index);
    ZRT_ENFORCE(ring.engine != nullptr, "wrap_engine returned no engine");
    if (options.fixed_buffers && !fixedBuffers.empty() && kind == EngineKind::IoUring) {
      const int err = ring.engine->registerBuffers(fixedBuffers);
      ring.fixedBuffers = err == 0;
      if (err != 0) {
        warnOnce("fixed-buffers",
                 zrt::detail::cat("registering ", fixedBuffers.size(), " buffers (",
                             totalBytes(fixedBuffers), ") with io_uring failed: ",
                             std::strerror(err),
                             err == ENOMEM ? " (RLIMIT_MEMLOCK too low for registered buffers?)"
                                           : "",
                             "; continuing without fixed buffers"));
      }
    }
    ring.pieces = std::vector<Piece>(depth);
    for (auto& p : ring.pieces) ring.free.push_back(&p);
    ring.toQueue.reserve(depth);
    ring.immediate.reserve(depth);
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();
  try {
    loop(ring);
  } catch (...) {
    breakRing(ring, std::current_exception());
  }
}

void OffloadEngine::Impl::loop(Ring& ring) {
  std::vector<std::shared_ptr<IoRequest>> exhausted;
  std::vector<IoUnit*> reaped;
  reaped.reserve(ring.pieces.size());
  for (;;) {
    {
      std::unique_lock lock(mu);
      for (;;) {
        takeLocked(ring, exhausted);
        const bool active = ring.free.size() < ring.pieces.size();
        if (active || !exhausted.empty()) break;
        if (stopping && queue.empty()) return;
        ring.state = RingState::Idle;
        // Waits for a new request (or shutdown); nothing of this ring is in flight.
        workCv.wait(lock);
      }
      ring.state = ring.free.empty() ? RingState::Running : RingState::Reaping;
    }
    // Outside the scheduler lock: completing a request may run its callback, which may
    // submit more work.
    for (auto& req : exhausted) req->markAllIssued(counted(ring));
    exhausted.clear();

    queuePieces(ring);
    ring.engine->commit();

    if (!ring.immediate.empty()) {
      std::vector<Piece*> now;
      now.swap(ring.immediate);
      for (Piece* p : now) onCompletion(ring, *p);
      continue;
    }
    if (ring.inEngine == 0) continue;
    reaped.clear();
    // Waits for at least one transfer of this ring to finish, or for new work (wake()).
    ring.engine->reap(1, kReapSlice, reaped);
    for (IoUnit* unit : reaped) {
      --ring.inEngine;
      onCompletion(ring, *static_cast<Piece*>(unit->owner));
    }
  }
}

// Fills this ring's free slots with pieces of the oldest requests. Requests with nothing left
// to issue (all issued, or cancelled by a failure) leave the queue through `exhausted`.
void OffloadEngine::Impl::takeLocked(Ring& ring,
                                     std::vector<std::shared_ptr<IoRequest>>& exhausted) {
  if (fatal) {
    // A broken engine issues nothing more; requests still queued fail with its error.
    while (!queue.empty()) {
      auto req = std::move(queue.front());
      queue.pop_front();
      {
        std::lock_guard rl(req->mu);
        req->cancelled = true;
        if (!req->error) req->error = fatal;
      }
      exhausted.push_back(std::move(req));
    }
    return;
  }
  while (!ring.free.empty() && !queue.empty()) {
    IoRequest& req = *queue.front();
    if (req.cursor >= req.len || req.isCancelled()) {
      exhausted.push_back(std::move(queue.front()));
      queue.pop_front();
      continue;
    }
    Piece* p = ring.free.back();
    ring.free.pop_back();
    p->req = queue.front();
    buildPiece(req, *p);
    req.pieceIssued();
    ring.toQueue.push_back(p);
    const std::uint64_t now = inFlight.fetch_add(1) + 1;
    std::uint64_t most = maxInFlight.load();
    while (now > most && !maxInFlight.compare_exchange_weak(most, now)) {
    }
  }
}

void OffloadEngine::Impl::buildPiece(IoRequest& req, Piece& p) const {
  const OffloadFile& file = *req.file;
  const std::uint64_t pos = req.cursor;
  const std::uint64_t abs = req.offset + pos;
  const StripeLocation loc = locateStripe(abs, file.stripes(), file.stripeUnit());
  p.stripe = loc.stripe;
  p.fileOffset = loc.fileOffset;
  p.direct = file.direct(loc.stripe);
  p.align = file.alignment();
  p.done = 0;
  p.retries = 0;
  p.start = Clock::now();
  if (pos < req.directLen) {
    // Cut at block_size boundaries of the file offset (as fio does) and at stripe ends. Under
    // O_DIRECT the block is rounded up to the logical block size: a 512-byte or 6 KiB block on
    // a 4 KiB-sector drive would otherwise give transfers the kernel refuses (EINVAL).
    const std::uint64_t block = alignUp(options.block_size, p.align);
    const std::uint64_t n = std::min<std::uint64_t>(
        {block - abs % block, req.directLen - pos, loc.contiguous});
    p.buf = req.buf + pos;
    p.len = p.need = p.logical = static_cast<std::size_t>(n);
    p.tail = false;
    req.cursor += n;
  } else {
    // The tail: one block through the request's padded buffer.
    const std::size_t tailBytes = req.len - req.directLen;
    p.buf = req.tail.data();
    p.len = req.tail.size();
    p.need = req.dir == IoDir::Read ? tailBytes : p.len;
    p.logical = tailBytes;
    p.tail = true;
    req.cursor += tailBytes;
  }
}

void OffloadEngine::Impl::queuePieces(Ring& ring) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < ring.toQueue.size(); ++i) {
    Piece& p = *ring.toQueue[i];
    IoUnit& u = p.unit;
    u.dir = p.req->dir;
    u.fd = p.req->file->fd(p.stripe);
    u.buf = p.buf + p.done;
    u.len = p.len - p.done;
    u.offset = p.fileOffset + p.done;
    u.result = 0;
    u.owner = &p;
    ring.engine->prepare(u);
    switch (ring.engine->queue(u)) {
      case QueueResult::Queued:
        ++ring.inEngine;
        if (options.single_submit) ring.engine->commit();
        break;
      case QueueResult::Completed:
        ring.immediate.push_back(&p);
        break;
      case QueueResult::Busy:
        // No room: keep it for after the next reap.
        ring.toQueue[kept++] = &p;
        break;
    }
  }
  ring.toQueue.resize(kept);
}

std::exception_ptr OffloadEngine::Impl::transferError(const Piece& p, int err,
                                                      std::string_view what) const {
  const IoRequest& req = *p.req;
  try {
    ZRT_THROW_ERRNO(err, nameOf(req.dir), " of ", p.len - p.done, " bytes at offset ",
                    p.fileOffset + p.done, " of '", req.file->path(p.stripe).string(),
                    "' failed: ", what, " (request: ", req.describe(), ")");
  } catch (...) {
    return std::current_exception();
  }
}

void OffloadEngine::Impl::onCompletion(Ring& ring, Piece& p) {
  const std::int64_t res = p.unit.result;
  const bool read = p.req->dir == IoDir::Read;
  auto resubmit = [&](bool isShort) {
    std::lock_guard lock(ring.statsMu);
    ++(isShort ? ring.stats.shortResubmits : ring.stats.retries);
    ring.toQueue.push_back(&p);
  };
  if (res < 0) {
    const int err = static_cast<int>(-res);
    if ((err == EAGAIN || err == EINTR) && ++p.retries <= kMaxRetries) return resubmit(false);
    return finish(ring, p, transferError(p, err, std::strerror(err)));
  }
  auto moved = static_cast<std::size_t>(res);
  bool endOfFile = read && moved == 0;
  if (p.direct && moved % p.align != 0) {
    // Direct transfers move whole blocks, except a read that reaches the end of the file; a
    // write cut inside a block is resumed from that block's start (same bytes again), since
    // O_DIRECT cannot start mid-block.
    if (read) endOfFile = true;
    else moved = alignDown(moved, p.align);
  }
  p.done += moved;
  if (p.done >= p.len || (endOfFile && p.done >= p.need)) return finish(ring, p, nullptr);
  if (endOfFile) {
    return finish(ring, p,
                  transferError(p, ENODATA,
                                zrt::detail::cat("unexpected end of file after ", p.done, " of ",
                                            p.need, " bytes")));
  }
  if (moved == 0) {
    // A write that moved nothing: try again a bounded number of times, then give up rather
    // than spin.
    if (++p.retries <= kMaxRetries) return resubmit(false);
    return finish(ring, p, transferError(p, EIO, "the write makes no progress"));
  }
  // Short read or write: the kernel moved part of it (a signal, memory pressure, a write
  // stopped near ENOSPC). Requeue the rest; a real error will surface on that attempt.
  resubmit(true);
}

void OffloadEngine::Impl::finish(Ring& ring, Piece& p, std::exception_ptr err) {
  IoRequest& req = *p.req;
  if (!err && p.tail && req.dir == IoDir::Read) {
    std::memcpy(req.buf + req.directLen, p.buf, req.len - req.directLen);
  }
  {
    std::lock_guard lock(ring.statsMu);
    if (err) {
      ++ring.stats.failures;
    } else {
      ++ring.stats.transfers;
      (req.dir == IoDir::Read ? ring.stats.bytesRead : ring.stats.bytesWritten) += p.logical;
      ring.stats.latency.record(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - p.start).count()));
    }
  }
  auto request = std::move(p.req);
  ring.free.push_back(&p);
  inFlight.fetch_sub(1);
  request->pieceFinished(err ? 0 : p.logical, err, counted(ring));
}

// The ring's engine threw (a failed submit or wait): it cannot be trusted with more work.
// Fail what it holds, refuse new requests, and let the other rings drain.
void OffloadEngine::Impl::breakRing(Ring& ring, std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    logError(zrt::detail::cat("I/O ring ", ring.index, " failed and stops: ", e.what()));
  } catch (...) {
    // A wrapped test engine may throw anything; it must not escape the ring thread.
    logError(zrt::detail::cat("I/O ring ", ring.index, " failed and stops: non-standard exception"));
  }
  {
    std::lock_guard lock(mu);
    if (!fatal) fatal = err;
  }
  // Give transfers the kernel still holds a bounded chance to finish before their requests
  // are failed, so their buffers are not reused under a running transfer.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::vector<IoUnit*> reaped;
  while (ring.inEngine > 0 && Clock::now() < deadline) {
    reaped.clear();
    try {
      ring.engine->reap(1, kReapSlice, reaped);
    } catch (...) {
      break;
    }
    for (IoUnit* unit : reaped) {
      --ring.inEngine;
      auto& p = *static_cast<Piece*>(unit->owner);
      if (p.req) finish(ring, p, err);
    }
  }
  for (auto& p : ring.pieces) {
    if (p.req) finish(ring, p, err);
  }
  ring.toQueue.clear();
  ring.immediate.clear();
  std::vector<std::shared_ptr<IoRequest>> exhausted;
  {
    std::lock_guard lock(mu);
    ring.state = RingState::Running;  // never sleeps again: no wake-ups sent to it
    takeLocked(ring, exhausted);      // fails the queued requests (fatal is set)
  }
  for (auto& req : exhausted) {
    req->markAllIssued([this](const IoRequest& r) { retire(r); });
  }
  workCv.notify_all();
}

void OffloadEngine::Impl::retire(const IoRequest& req) {
  std::lock_guard lock(outstandingMu);
  outstanding.erase(req.seq);
}

IoRequest::Retired OffloadEngine::Impl::counted(Ring& ring) {
  return [this, &ring](const IoRequest& req) {
    retire(req);
    std::lock_guard lock(ring.statsMu);
    ++ring.stats.requests;
  };
}

// ---------------------------------------------------------------------------------------------
// Submission

IoHandle OffloadEngine::Impl::submit(IoDir dir, std::shared_ptr<OffloadFile> file,
                                     std::uint64_t offset, std::byte* buf, std::size_t len,
                                     CompletionCallback cb) {
  if (!file) ZRT_THROW(InvalidArgument, nameOf(dir), " of ", len, " bytes: no file given");
  if (len > 0 && buf == nullptr)
    ZRT_THROW(InvalidArgument, nameOf(dir), " of ", len, " bytes at offset ", offset, " of ",
              file->name(), ": null buffer");
  auto req = std::make_shared<IoRequest>();
  req->dir = dir;
  req->file = std::move(file);
  req->offset = offset;
  req->buf = buf;
  req->len = len;
  req->onComplete = std::move(cb);
  const std::size_t align = req->file->alignment();
  if (req->file->anyDirect()) {
    const auto addr = reinterpret_cast<std::uintptr_t>(buf);
    if (addr % align != 0 || offset % align != 0) {
      ZRT_THROW(InvalidArgument, req->describe(), ": O_DIRECT needs the buffer address (0x",
                std::hex, addr, std::dec, ") and the file offset to be multiples of ", align,
                " bytes, the logical block size");
    }
    req->directLen = alignDown(len, align);
    if (req->directLen < len) {
      req->tail = AlignedBuffer(align, align);
      if (dir == IoDir::Write) {
        std::memcpy(req->tail.data(), buf + req->directLen, len - req->directLen);
      }
    }
  } else {
    req->directLen = len;
  }
  IoHandle handle(req);
  if (len == 0) {
    req->markAllIssued({});
    return handle;
  }
  std::vector<Ring*> toWake;
  bool notifyIdle = false;
  {
    std::lock_guard lock(mu);
    if (fatal) std::rethrow_exception(fatal);
    ZRT_ENFORCE(!stopping, "request submitted to an engine being destroyed");
    {
      // Before the rings can see it: a ring may finish it (and retire it) at once.
      std::lock_guard out(outstandingMu);
      req->seq = nextSeq++;
      req->accepted = Clock::now();
      outstanding.emplace(req->seq, std::pair{req->accepted, dir});
    }
    queue.push_back(std::move(req));
    for (auto& ring : rings) {
      if (ring->state == RingState::Idle) notifyIdle = true;
      if (ring->state == RingState::Reaping) toWake.push_back(ring.get());
    }
  }
  if (notifyIdle) workCv.notify_all();
  for (Ring* ring : toWake) ring->engine->wake();
  return handle;
}

// ---------------------------------------------------------------------------------------------
// OffloadEngine

OffloadEngine::OffloadEngine(AioOptions options, std::vector<iovec> fixedBuffers)
    : impl_(std::make_unique<Impl>()) {
  validate(options);
  impl_->options = std::move(options);
  impl_->kind = resolveKind(impl_->options.engine);
  impl_->fixedBuffers = std::move(fixedBuffers);
  const int n = impl_->options.intra_op_parallelism;
  std::exception_ptr startError;
  for (int i = 0; i < n; ++i) {
    auto ring = std::make_unique<Ring>();
    ring->index = i;
    Ring* raw = ring.get();
    impl_->rings.push_back(std::move(ring));
    // The promise lives in the thread, so it outlives its own set_value().
    std::promise<void> ready;
    auto future = ready.get_future();
    raw->thread = std::thread([impl = impl_.get(), raw, ready = std::move(ready)]() mutable {
      impl->runRing(*raw, ready);
      std::lock_guard lock(impl->mu);
      ++impl->ringsExited;
      impl->exitCv.notify_all();
    });
    try {
      future.get();  // Waits for the ring to exist (or fail) before the next starts.
    } catch (...) {
      startError = std::current_exception();
      break;
    }
  }
  if (startError) {
    {
      std::lock_guard lock(impl_->mu);
      impl_->stopping = true;
    }
    impl_->workCv.notify_all();
    for (auto& ring : impl_->rings) {
      if (ring->thread.joinable()) ring->thread.join();
    }
    std::rethrow_exception(startError);
  }
  ZRT_INFO("offload engine: ", describe());
}

OffloadEngine::~OffloadEngine() {
  std::vector<Ring*> toWake;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (auto& ring : impl_->rings) {
      if (ring->state == RingState::Reaping) toWake.push_back(ring.get());
    }
  }
  impl_->workCv.notify_all();
  for (Ring* ring : toWake) ring->engine->wake();
  // Each ring finishes the requests already accepted, then returns. A drive that stops answering
  // would hold this forever: the rings cannot be abandoned while transfers still point into the
  // engine, so keep waiting, but say what for at every timeout.
  {
    const auto timeout = defaultWaitTimeout();
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(impl_->mu);
    while (!impl_->exitCv.wait_for(lock, timeout,
                                   [&] { return impl_->ringsExited == impl_->rings.size(); })) {
      const double waited = secondsSince(start);
      logError(zrt::detail::cat(
          "offload engine shutting down: ", impl_->rings.size() - impl_->ringsExited, " of ",
          impl_->rings.size(), " ring(s) still finishing accepted transfers (",
          impl_->queue.size(), " request(s) not yet started) after ", waited,
          " s; a drive that does not answer? still waiting"));
    }
  }
  for (auto& ring : impl_->rings) {
    if (ring->thread.joinable()) ring->thread.join();
  }
}

FileOpenOptions OffloadEngine::fileOptions() const {
  FileOpenOptions o;
  o.direct = impl_->options.direct;
  o.stripeUnit = impl_->options.block_size;
  return o;
}

std::shared_ptr<OffloadFile> OffloadEngine::open(const std::vector<std::filesystem::path>& stripes,
                                                 FileOpenOptions options) const {
  options.direct = impl_->options.direct;
  return OffloadFile::open(stripes, options);
}

IoHandle OffloadEngine::read(std::shared_ptr<OffloadFile> file, std::uint64_t offset, void* buf,
                             std::size_t len, CompletionCallback onComplete) {
  return impl_->submit(IoDir::Read, std::move(file), offset, static_cast<std::byte*>(buf), len,
                       std::move(onComplete));
}

IoHandle OffloadEngine::write(std::shared_ptr<OffloadFile> file, std::uint64_t offset,
                              const void* buf, std::size_t len, CompletionCallback onComplete) {
  // The engine never writes through a write request's buffer.
  return impl_->submit(IoDir::Write, std::move(file), offset,
                       static_cast<std::byte*>(const_cast<void*>(buf)), len,
                       std::move(onComplete));
}

void OffloadEngine::readSync(std::shared_ptr<OffloadFile> file, std::uint64_t offset, void* buf,
                             std::size_t len, std::chrono::milliseconds timeout) {
  read(std::move(file), offset, buf, len).wait(timeout);
}

void OffloadEngine::writeSync(std::shared_ptr<OffloadFile> file, std::uint64_t offset,
                              const void* buf, std::size_t len,
                              std::chrono::milliseconds timeout) {
  write(std::move(file), offset, buf, len).wait(timeout);
}

const AioOptions& OffloadEngine::options() const { return impl_->options; }
EngineKind OffloadEngine::kind() const { return impl_->kind; }

bool OffloadEngine::fixedBuffersActive() const {
  return !impl_->rings.empty() &&
         std::all_of(impl_->rings.begin(), impl_->rings.end(),
                     [](const auto& r) { return r->fixedBuffers; });
}

std::string OffloadEngine::describe() const {
  const AioOptions& o = impl_->options;
  return zrt::detail::cat(nameOf(impl_->kind), ": ", o.intra_op_parallelism, " ring",
                     o.intra_op_parallelism == 1 ? "" : "s", " x queue depth ", o.queue_depth,
                     ", block ", formatBytes(o.block_size), ", ",
                     o.single_submit ? "single" : "batched", " submission, ",
                     fixedBuffersActive() ? "fixed buffers" : "no fixed buffers", ", direct I/O ",
                     nameOf(o.direct));
}

EngineStats OffloadEngine::stats() const {
  EngineStats total;
  for (const auto& ring : impl_->rings) {
    std::lock_guard lock(ring->statsMu);
    const EngineStats& s = ring->stats;
    total.requests += s.requests;
    total.transfers += s.transfers;
    total.bytesRead += s.bytesRead;
    total.bytesWritten += s.bytesWritten;
    total.shortResubmits += s.shortResubmits;
    total.retries += s.retries;
    total.failures += s.failures;
    total.latency.merge(s.latency);
  }
  total.queueCapacity = static_cast<std::uint64_t>(impl_->options.queue_depth) *
                        static_cast<std::uint64_t>(impl_->options.intra_op_parallelism);
  total.transfersInFlight = impl_->inFlight.load();
  total.maxTransfersInFlight = impl_->maxInFlight.load();
  std::lock_guard lock(impl_->outstandingMu);
  total.requestsOutstanding = impl_->outstanding.size();
  if (!impl_->outstanding.empty()) {
    const auto& [accepted, dir] = impl_->outstanding.begin()->second;
    total.oldestRequestSeconds = secondsSince(accepted);
    total.oldestRequestDir = dir;
  }
  return total;
}

void OffloadEngine::resetStats() {
  for (auto& ring : impl_->rings) {
    std::lock_guard lock(ring->statsMu);
    ring->stats = EngineStats();
  }
  impl_->maxInFlight.store(impl_->inFlight.load());
}

}  // namespace zrt::offload
