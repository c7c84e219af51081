#include "runtime/optimizer_swapper.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/timing.h"

namespace zrt {

namespace {
constexpr std::uint64_t kSubGroupAlign = 1024;  // fp32 elements: 4 KiB
}

std::uint64_t OptimizerSwapper::subGroupElements(std::uint64_t count, std::uint64_t subGroupSize) {
  const std::uint64_t s = std::max<std::uint64_t>(1, std::min(subGroupSize, count));
  return (s + kSubGroupAlign - 1) / kSubGroupAlign * kSubGroupAlign;
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

void OptimizerSwapper::run(const std::function<void(const Window&)>& fn, bool read) {
  const std::size_t slotsCount = static_cast<std::size_t>(options_.bufferCount);
  struct Slot {
    offload::PinnedBufferPool::Lease lease;
    std::vector<offload::IoHandle> reads, writes;
  };
  std::vector<Slot> slots(slotsCount);
  auto windowOf = [&](std::size_t g) {
    Window w;
    w.index = g;
    w.begin = g * subGroup_;
    w.count = std::min(subGroup_, count_ - w.begin);
    auto* base = reinterpret_cast<float*>(slots[g % slotsCount].lease.data());
    for (std::size_t k = 0; k < files_.size(); ++k) w.states.push_back(base + k * subGroup_);
    return w;
  };
  auto waitFor = [&](std::vector<offload::IoHandle>& handles) {
    if (handles.empty()) return;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<offload::IoHandle> h = std::move(handles);
    handles.clear();
    offload::waitAll(h);
    stats_.ioWaitSeconds += secondsSince(t0);
  };
  // Sub-group g's slot: the write-back of the sub-group that used it last must be done.
  std::size_t issued = 0;
  auto issueUpTo = [&](std::size_t last) {
    for (; issued <= last && issued < groups_; ++issued) {
      Slot& slot = slots[issued % slotsCount];
      waitFor(slot.writes);
      if (!slot.lease) slot.lease = pool_.acquire();
      if (!read) continue;
      const Window w = windowOf(issued);
      for (std::size_t k = 0; k < files_.size(); ++k) {
        slot.reads.push_back(io_.read(files_[k]->file(), w.begin * 4, w.states[k], w.count * 4));
        stats_.bytesRead += w.count * 4;
      }
    }
  };
  try {
    const std::size_t ahead = options_.pipelineRead ? slotsCount - 1 : 0;
    if (groups_ > 0 && ahead > 0) issueUpTo(ahead - 1);
    for (std::size_t g = 0; g < groups_; ++g) {
      issueUpTo(g);
      Slot& slot = slots[g % slotsCount];
      waitFor(slot.reads);
      const Window w = windowOf(g);
      const auto t0 = std::chrono::steady_clock::now();
      fn(w);
      stats_.updateSeconds += secondsSince(t0);
      for (std::size_t k = 0; k < files_.size(); ++k) {
        slot.writes.push_back(io_.write(files_[k]->file(), w.begin * 4, w.states[k], w.count * 4));
        stats_.bytesWritten += w.count * 4;
      }
      if (!options_.pipelineWrite) waitFor(slot.writes);
      // Reads ahead into the slots whose write-backs ran while this sub-group stepped.
      if (ahead > 0) issueUpTo(g + ahead);
    }
    for (Slot& slot : slots) waitFor(slot.writes);
  } catch (...) {
    // No request may outlive its buffer: finish everything in flight, then report the first error.
    for (Slot& slot : slots) {
      for (auto* hs : {&slot.reads, &slot.writes})
        for (const offload::IoHandle& h : *hs) {
          try {
            h.wait();
          } catch (...) {
          }
        }
    }
    throw;
  }
}

}  // namespace zrt
