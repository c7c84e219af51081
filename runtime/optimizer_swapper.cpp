#include "runtime/optimizer_swapper.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/timing.h"
#include "core/wait.h"

namespace zrt {

namespace {
constexpr std::uint64_t kSubGroupAlign = 1024;  // fp32 elements: 4 KiB
}

std::uint64_t OptimizerSwapper::subGroupElements(std::uint64_t count, std::uint64_t subGroupSize) {
  const std::uint64_t s = std::max<std::uint64_t>(1, std::min(subGroupSize, count));
  return (s + kSubGroupAlign - 1) / kSubGroupAlign * kSubGroupAlign;
}

std::size_t OptimizerSwapper::buffersUsed(std::uint64_t count, std::uint64_t subGroupSize, int bufferCount) {
  const std::uint64_t group = subGroupElements(count, subGroupSize);
  const std::uint64_t groups = std::max<std::uint64_t>(1, (count + group - 1) / group);
  return static_cast<std::size_t>(std::min<std::uint64_t>(groups, static_cast<std::uint64_t>(std::max(1, bufferCount))));
}

OptimizerSwapper::OptimizerSwapper(offload::OffloadEngine& io, offload::PinnedBufferPool& pool,
                                   std::vector<const offload::SwapFile*> files, std::uint64_t count,
                                   OptimizerSwapperOptions options)
    : io_(io),
      pool_(pool),
      files_(std::move(files)),
      count_(count),
      subGroup_(subGroupElements(count, options.subGroupSize)),
      groups_(static_cast<std::size_t>((count + subGroup_ - 1) / subGroup_)),
      options_(options) {
  if (options_.bufferCount < 1)
    ZRT_THROW(InvalidArgument, "offload_optimizer.buffer_count must be at least 1, got ", options_.bufferCount);
  for (const offload::SwapFile* f : files_)
    if (!f || f->bytes() < count_ * 4)
      ZRT_THROW(InvalidArgument, "optimizer swapper: a state file is missing or smaller than ",
                count_ * 4, " bytes");
}

void OptimizerSwapper::forEach(const std::function<void(const Window&)>& update) { run(update, true); }
void OptimizerSwapper::fill(const std::function<void(const Window&)>& fill) { run(fill, false); }

int OptimizerSwapper::optimizerThreads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 1 ? static_cast<int>(cores) - 1 : 1;
}

OptimizerSwapper::Stats OptimizerSwapper::takeStats() { return std::exchange(stats_, {}); }

// What one pass shares between the thread driving it and the I/O completions. Held by a
// shared_ptr that every completion keeps: an engine marks a request done before it runs the
// request's callback, so a callback may still be returning after the driving thread has seen
// everything finish.
struct OptimizerSwapper::Pass {
  offload::OffloadEngine* io = nullptr;
  std::vector<std::shared_ptr<offload::OffloadFile>> files;
  std::uint64_t count = 0, subGroup = 0;
  std::size_t groups = 0, slots = 0;
  bool chainReads = false;  // a finished write-back issues the read of its slot's next sub-group
  std::function<void(const SwapEvent&)> observer;
  // Each slot's buffer. The driving thread gives the leases back once nothing is in flight;
  // if the engine never finishes, they go only with the last completion's reference.
  std::vector<offload::PinnedBufferPool::Lease> leases;
  std::vector<float*> base;

  std::mutex mu;
  std::condition_variable cv;  // any request finished, or one was issued by a completion
  // Per slot and state, guarded by mu: the sub-group whose read was issued into it and the one
  // whose read finished (kNone: none yet), and whether a write-back from it is in flight.
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> readIssued, readDone;
  std::vector<char> writing;
  std::size_t inFlight = 0;  // requests issued and not yet finished
  bool stopping = false;     // issue nothing more (an error, or the pass is unwinding)
  std::exception_ptr error;  // the first failure
  std::uint64_t bytesRead = 0, bytesWritten = 0;

  std::size_t at(std::size_t slot, std::size_t state) const { return slot * files.size() + state; }
  float* stateOf(std::size_t g, std::size_t k) const { return base[g % slots] + k * subGroup; }
  std::uint64_t beginOf(std::size_t g) const { return g * subGroup; }
  std::uint64_t countOf(std::size_t g) const { return std::min(subGroup, count - beginOf(g)); }
  void notify(SwapEvent::Kind kind, std::size_t g, std::size_t k, bool failed = false) const {
    if (observer) observer(SwapEvent{kind, g, k, failed});
  }
  void failLocked(std::exception_ptr e) {
    if (!error) error = std::move(e);
    stopping = true;
  }

  // Issues the read of state k of sub-group g into its slot. Called with mu held; the engine
  // runs completions on its ring threads only (never inside read()), so this cannot deadlock.
  void issueReadLocked(const std::shared_ptr<Pass>& self, std::size_t g, std::size_t k) {
    const std::size_t i = at(g % slots, k);
    readIssued[i] = g;
    notify(SwapEvent::Kind::ReadIssued, g, k);
    try {
      io->read(files[k], beginOf(g) * 4, stateOf(g, k), countOf(g) * 4,
               [self, g, k, i](std::exception_ptr err) {
                 std::lock_guard lock(self->mu);
                 --self->inFlight;
                 self->notify(SwapEvent::Kind::ReadDone, g, k, err != nullptr);
                 if (err) self->failLocked(err);
                 else self->readDone[i] = g;
                 self->cv.notify_all();
               });
      ++inFlight;
      bytesRead += countOf(g) * 4;
    } catch (...) {
      failLocked(std::current_exception());
    }
  }

  void issueWriteLocked(const std::shared_ptr<Pass>& self, std::size_t g, std::size_t k) {
    const std::size_t i = at(g % slots, k);
    writing[i] = 1;
    notify(SwapEvent::Kind::WriteIssued, g, k);
    try {
      io->write(files[k], beginOf(g) * 4, stateOf(g, k), countOf(g) * 4,
                [self, g, k, i](std::exception_ptr err) {
                  std::lock_guard lock(self->mu);
                  --self->inFlight;
                  self->writing[i] = 0;
                  self->notify(SwapEvent::Kind::WriteDone, g, k, err != nullptr);
                  if (err) self->failLocked(err);
                  // The region is free: start reading this state of the slot's next sub-group
                  // now, whatever the driving thread is doing.
                  const std::size_t next = g + self->slots;
                  if (self->chainReads && !self->stopping && next < self->groups)
                    self->issueReadLocked(self, next, k);
                  self->cv.notify_all();
                });
      ++inFlight;
      bytesWritten += countOf(g) * 4;
    } catch (...) {
      writing[i] = 0;
      failLocked(std::current_exception());
    }
  }
};

void OptimizerSwapper::run(const std::function<void(const Window&)>& fn, bool read) {
  if (groups_ == 0) return;
  auto pass = std::make_shared<Pass>();
  Pass& p = *pass;
  p.io = &io_;
  for (const offload::SwapFile* f : files_) p.files.push_back(f->file());
  p.count = count_;
  p.subGroup = subGroup_;
  p.groups = groups_;
  p.slots = buffersUsed(count_, options_.subGroupSize, options_.bufferCount);
  p.chainReads = read && options_.pipelineRead;
  p.observer = options_.observer;
  const std::size_t states = files_.size();
  p.readIssued.assign(p.slots * states, Pass::kNone);
  p.readDone.assign(p.slots * states, Pass::kNone);
  p.writing.assign(p.slots * states, 0);
  // The buffers, taken before anything is issued and given back only when nothing is in flight.
  for (std::size_t s = 0; s < p.slots; ++s) {
    p.leases.push_back(pool_.acquire());
    p.base.push_back(reinterpret_cast<float*>(p.leases.back().data()));
  }

  const auto timeout = defaultWaitTimeout();
  // Waits (mu held) until `done`, or an error, or the timeout, which names `what`.
  auto waitLocked = [&](std::unique_lock<std::mutex>& lock, auto done, auto what) {
    const auto t0 = std::chrono::steady_clock::now();
    // Waits for the I/O completions (ring threads) to finish the requests `done` looks at.
    const bool ok = p.cv.wait_for(lock, timeout, [&] { return p.error != nullptr || done(); });
    stats_.ioWaitSeconds += secondsSince(t0);
    if (!ok)
      ZRT_THROW(TimeoutError, "optimizer swapper: waited ",
                static_cast<double>(timeout.count()) / 1000.0, " s for ", what(), " (",
                p.inFlight, " requests in flight; ZRT_WAIT_TIMEOUT_S sets the bound)");
    if (p.error) std::rethrow_exception(p.error);
  };
  auto windowOf = [&](std::size_t g) {
    Window w;
    w.index = g;
    w.begin = p.beginOf(g);
    w.count = p.countOf(g);
    for (std::size_t k = 0; k < states; ++k) w.states.push_back(p.stateOf(g, k));
    return w;
  };
  auto describe = [&](const char* what, std::size_t g) {
    return [&, what, g] {
      return zrt::detail::cat(what, " of sub-group ", g, " of ", p.groups, " (elements ", p.beginOf(g),
                              "..", p.beginOf(g) + p.countOf(g), ")");
    };
  };

  try {
    std::unique_lock lock(p.mu);
    if (p.chainReads)
      for (std::size_t g = 0; g < p.slots; ++g)
        for (std::size_t k = 0; k < states; ++k) p.issueReadLocked(pass, g, k);
    for (std::size_t g = 0; g < p.groups; ++g) {
      const std::size_t s = g % p.slots;
      auto slotFree = [&] {
        for (std::size_t k = 0; k < states; ++k)
          if (p.writing[p.at(s, k)]) return false;
        return true;
      };
      if (read) {
        // Unless a completion already issued them, the reads wait for the write-backs that
        // free the buffer, then start here.
        waitLocked(lock, [&] {
          for (std::size_t k = 0; k < states; ++k) {
            const std::size_t i = p.at(s, k);
            if (p.readIssued[i] != g && p.writing[i]) return false;
          }
          return true;
        }, describe("the write-back freeing the buffer", g));
        for (std::size_t k = 0; k < states; ++k)
          if (p.readIssued[p.at(s, k)] != g) p.issueReadLocked(pass, g, k);
        waitLocked(lock, [&] {
          for (std::size_t k = 0; k < states; ++k)
            if (p.readDone[p.at(s, k)] != g) return false;
          return true;
        }, describe("the reads", g));
      } else {
        waitLocked(lock, slotFree, describe("the write-back freeing the buffer", g));
      }
      const Window w = windowOf(g);
      lock.unlock();
      p.notify(SwapEvent::Kind::UpdateBegin, g, 0);
      const auto t0 = std::chrono::steady_clock::now();
      fn(w);
      stats_.updateSeconds += secondsSince(t0);
      p.notify(SwapEvent::Kind::UpdateEnd, g, 0);
      lock.lock();
      if (p.error) std::rethrow_exception(p.error);
      for (std::size_t k = 0; k < states; ++k) p.issueWriteLocked(pass, g, k);
      if (!options_.pipelineWrite) waitLocked(lock, slotFree, describe("the write-back", g));
    }
    waitLocked(lock, [&] { return p.inFlight == 0; }, [] { return std::string("the last write-backs"); });
    stats_.bytesRead += p.bytesRead;
    stats_.bytesWritten += p.bytesWritten;
    p.leases.clear();
  } catch (...) {
    // No request may outlive its buffer: issue nothing more, wait for what is in flight, then
    // report the first error (an I/O error rather than what it caused).
    std::unique_lock lock(p.mu);
    p.stopping = true;
    stats_.bytesRead += p.bytesRead;
    stats_.bytesWritten += p.bytesWritten;
    // Waits for the requests already issued to finish (their buffers are ours).
    if (p.cv.wait_for(lock, timeout, [&] { return p.inFlight == 0; })) {
      p.leases.clear();
    } else {
      // The engine is stuck: handing the buffers back could let a late transfer land in
      // someone else's data, so they stay leased (the pass's state keeps them) until it ends.
      logError(zrt::detail::cat("optimizer swapper: ", p.inFlight, " requests still in flight after ",
                                static_cast<double>(timeout.count()) / 1000.0,
                                " s; keeping their buffers out of the pool"));
    }
    const std::exception_ptr first = p.error;
    lock.unlock();
    if (first) std::rethrow_exception(first);
    throw;
  }
}

}  // namespace zrt
