#include "io_benchmark.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "data_pattern.h"
#include "offload/aligned_buffer.h"
#include "offload/latency_histogram.h"
#include "offload/offload_engine.h"
#include "offload/pinned_buffer_pool.h"
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"

namespace zrt::iotool {

using Clock = std::chrono::steady_clock;
using offload::alignUp;
using offload::IoHandle;
using offload::OffloadEngine;
using offload::PinnedBufferPool;

std::string_view nameOf(Mode mode) {
  switch (mode) {
    case Mode::Read: return "read";
    case Mode::Write: return "write";
    case Mode::ReadWrite: return "rw";
    case Mode::Swap: return "swap";
  }
  return "?";
}

Mode parseMode(std::string_view text) {
  if (text == "read") return Mode::Read;
  if (text == "write") return Mode::Write;
  if (text == "rw" || text == "readwrite") return Mode::ReadWrite;
  ZRT_THROW(InvalidArgument, "unknown mode '", text, "': expected read, write or rw");
}

namespace {

constexpr std::uint64_t kMaxRequest = 256ull << 20;

offload::AioOptions aioFor(const RunConfig& c) {
  offload::AioOptions o;
  o.block_size = c.blockSize;
  o.queue_depth = c.queueDepth;
  o.intra_op_parallelism = c.threads;
  o.single_submit = c.singleSubmit;
  o.fixed_buffers = c.fixedBuffers;
  o.engine = c.engine;
  o.direct = c.buffered ? offload::DirectIo::Off : offload::DirectIo::Auto;
  return o;
}

// How large the requests of a sequential run are, and how many are kept outstanding.
struct RequestPlan {
  std::uint64_t size = 0;
  std::size_t count = 0;
};

// The rings hold `fill` bytes in flight (block x depth x rings), and a finished request is
// only reissued once this thread has woken up for it. If at that moment every request still
// outstanding is already in the rings, a slot that frees before the reissue stays empty and
// the drive sees a shallower queue than asked. So the requests outstanding hold the fill plus
// a cushion of one more request queued behind it, (count - 1) x size >= fill + min(size, fill),
// and the rings (which take transfers from the oldest request first, whichever request they
// belong to) keep queue_depth transfers in flight across request boundaries, as fio, which
// reissues each transfer itself, keeps iodepth. By default a request is a quarter of the fill
// (whole blocks): at depths that are multiples of 4 the cushion is a quarter of the ring and 6
// requests pin 1.5 fills of memory; before issue 10 two requests of one fill each pinned 2
// fills with no cushion. Measured on the build VM (docs/offload.md), the old plan already kept
// 15.5-15.9 of 16 slots busy on average: the cushion is insurance against a late wake-up on a
// busy machine, not a speed-up there.
RequestPlan planRequests(const RunConfig& c, const Workload& w) {
  const std::uint64_t slots =
      static_cast<std::uint64_t>(c.queueDepth) * static_cast<std::uint64_t>(c.threads);
  const std::uint64_t fill = c.blockSize * slots;
  std::uint64_t size = w.requestSize ? w.requestSize
                                     : std::min(c.blockSize * ((slots + 3) / 4), kMaxRequest);
  size = alignUp(std::max(size, c.blockSize), 4096);
  size = std::min<std::uint64_t>(size, alignUp(w.fileSize, 4096));
  const std::uint64_t ahead = fill + std::min(size, fill);
  RequestPlan plan;
  plan.size = size;
  plan.count = w.requests > 0 ? static_cast<std::size_t>(w.requests)
                              : static_cast<std::size_t>(1 + (ahead + size - 1) / size);
  return plan;
}

void finishResult(RunResult& r, const offload::EngineStats& s) {
  r.bytes = r.readBytes + r.writeBytes;
  r.transfers = s.transfers;
  if (r.seconds > 0) {
    r.gbps = static_cast<double>(r.bytes) / r.seconds / 1e9;
    r.readGbps = static_cast<double>(r.readBytes) / r.seconds / 1e9;
    r.writeGbps = static_cast<double>(r.writeBytes) / r.seconds / 1e9;
    r.iops = static_cast<double>(s.transfers) / r.seconds;
  }
  // Little's law: slots busy on average = completions per second x time each held its slot.
  if (r.seconds > 0) r.meanInFlight = s.latency.meanNanos() / 1e9 * static_cast<double>(s.transfers) / r.seconds;
  r.p50us = static_cast<double>(s.latency.percentileNanos(0.50)) / 1e3;
  r.p99us = static_cast<double>(s.latency.percentileNanos(0.99)) / 1e3;
}

void noteMismatch(RunResult& r, std::int64_t at, const std::string& path, std::uint64_t offset) {
  ++r.verifyErrors;
  if (r.firstVerifyError.empty()) {
    r.firstVerifyError = zrt::detail::cat("data mismatch in ", path, " at byte offset ",
                                          offset + static_cast<std::uint64_t>(at));
  }
}

}  // namespace

Workspace::Workspace(Workload workload) : workload_(std::move(workload)) {
  if (workload_.paths.empty() && workload_.namedFiles.empty())
    ZRT_THROW(InvalidArgument, "--path or --filename: where should the test files go?");
  if (!workload_.namedFiles.empty() && workload_.swapPattern)
    ZRT_THROW(InvalidArgument, "--filename does not go with --pattern swap (it needs 3 files per rank)");
  if (workload_.fileSize == 0) ZRT_THROW(InvalidArgument, "--size must be positive");
  if (workload_.files < 1) ZRT_THROW(InvalidArgument, "--files must be at least 1");
  for (const auto& f : workload_.namedFiles) {
    // Bad input, not an I/O failure: say which --filename before anything is opened.
    std::error_code ec;
    const auto dir = f.parent_path().empty() ? std::filesystem::path(".") : f.parent_path();
    if (!std::filesystem::is_directory(dir, ec))
      ZRT_THROW(InvalidArgument, "--filename ", f.string(), ": directory ", dir.string(),
                " does not exist");
    if (std::filesystem::is_directory(f, ec))
      ZRT_THROW(InvalidArgument, "--filename ", f.string(), " is a directory (use --path for that)");
  }
  device_ = makeDevice("host", ledger_);
  if (workload_.namedFiles.empty())
    space_ = std::make_unique<offload::SwapSpace>(workload_.paths, ledger_, 0, "zrt-io");
  layout();
}

Workspace::~Workspace() = default;

// Creates the files and fills them with the pattern (so reads hit written blocks, not
// unwritten extents the file system answers with zeros without touching the disk).
void Workspace::layout() {
  const Workload& w = workload_;
  std::vector<std::string> names;
  if (w.swapPattern) {
    for (int r = 0; r < w.ranks; ++r) {
      for (const char* state : {"param", "exp_avg", "exp_avg_sq"})
        names.push_back("rank" + std::to_string(r) + "." + state);
    }
  } else {
    for (int i = 0; i < w.files; ++i) names.push_back("data." + std::to_string(i));
  }
  offload::FileOpenOptions fo;
  fo.stripeUnit = w.stripeUnit;
  std::uint32_t id = 0;
  std::string where;
  if (!w.namedFiles.empty()) {
    fo.create = true;
    fo.userNamedPath = true;
    for (const auto& path : w.namedFiles) {
      std::error_code ec;
      const auto existing = std::filesystem::file_size(path, ec);
      File f{id++, offload::OffloadFile::open(path, fo), w.fileSize, true, {}};
      // An existing file that is long enough is used as it is (as fio does), unless --verify
      // needs its own pattern in it.
      f.needsLayout = ec || existing < w.fileSize || w.verify;
      if (f.needsLayout) f.file->preallocate(w.fileSize);
      files_.push_back(std::move(f));
    }
    where = w.namedFiles.front().parent_path().string();
  } else {
    for (const auto& name : names) {
      offload::SwapFile swap = space_->create(name, w.fileSize, MemTag::Other, fo);
      auto file = swap.file();
      files_.push_back({id++, std::move(file), w.fileSize, true, std::move(swap)});
    }
    where = space_->directories().front().string();
  }
  const auto toLayOut = static_cast<std::size_t>(
      std::count_if(files_.begin(), files_.end(), [](const File& f) { return f.needsLayout; }));
  if (toLayOut == 0) return;
  if (!w.quiet) {
    std::fprintf(stderr, "zrt-io: laying out %zu file%s of %s in %s\n", toLayOut,
                 toLayOut == 1 ? "" : "s", formatBytes(w.fileSize).c_str(), where.c_str());
  }
  offload::AioOptions o;
  o.block_size = std::min<std::uint64_t>(w.stripeUnit, 1 << 20);
  o.queue_depth = 8;
  OffloadEngine engine(o);
  constexpr std::size_t kChunk = 16 << 20;
  offload::AlignedBuffer bufs[2] = {offload::AlignedBuffer(kChunk), offload::AlignedBuffer(kChunk)};
  IoHandle pending[2];
  int slot = 0;
  for (const File& f : files_) {
    if (!f.needsLayout) continue;
    for (std::uint64_t off = 0; off < f.size; off += kChunk) {
      const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, f.size - off));
      if (pending[slot].valid()) pending[slot].wait();
      fillPattern(bufs[slot].data(), len, f.id, off);
      pending[slot] = engine.write(f.file, off, bufs[slot].data(), len);
      slot ^= 1;
    }
  }
  for (auto& p : pending) {
    if (p.valid()) p.wait();
  }
  // Make the layout durable before anything is timed (as fio's create_fsync does): otherwise a
  // drive or hypervisor still writing it back slows the first timed run.
  for (const File& f : files_) {
    if (f.needsLayout) f.file->sync();
  }
}

std::shared_ptr<offload::OffloadFile> Workspace::reopen(const File& f, const RunConfig& c) const {
  std::vector<std::filesystem::path> paths;
  for (std::size_t i = 0; i < f.file->stripes(); ++i) paths.push_back(f.file->path(i));
  offload::FileOpenOptions fo;
  fo.direct = c.buffered ? offload::DirectIo::Off : offload::DirectIo::Auto;
  fo.stripeUnit = workload_.stripeUnit;
  fo.userNamedPath = !workload_.namedFiles.empty();
  return offload::OffloadFile::open(paths, fo);
}

RunResult Workspace::run(const RunConfig& c, const std::function<void(double)>& progress) {
  return workload_.swapPattern ? runSwap(c, progress) : runSequential(c, progress);
}

// ---------------------------------------------------------------------------------------------
// Sequential streams

RunResult Workspace::runSequential(const RunConfig& c, const std::function<void(double)>& progress) {
  const Workload& w = workload_;
  RunResult r;
  r.config = c;
  r.files = static_cast<int>(files_.size());
  r.fileSize = w.fileSize;

  const RequestPlan plan = planRequests(c, w);
  const std::uint64_t reqSize = plan.size;
  const std::size_t requests = plan.count;

  PinnedBufferPool pool(*device_, requests, reqSize, std::nullopt, c.fixedBuffers, w.hugePages);
  OffloadEngine engine(aioFor(c), c.fixedBuffers ? pool.iovecs() : std::vector<iovec>{});
  r.engine = engine.describe();
  std::vector<std::shared_ptr<offload::OffloadFile>> files;
  for (const File& f : files_) files.push_back(reopen(f, c));

  struct Stream {
    bool read = true;
    std::uint64_t start = 0;  // offset the stream starts at in each file
    std::uint64_t chunk = 0;
    std::uint64_t issued = 0;
  };
  // Sized up front rather than grown with push_back: GCC 12 at -O3 inlines push_back's
  // reallocation path here and warns, wrongly, that it writes past the new block
  // (-Wstringop-overflow).
  std::vector<Stream> streams(c.mode == Mode::ReadWrite ? 2 : 1);
  streams.front().read = c.mode != Mode::Write;
  // With reads and writes together, writes start half a file away from the reads.
  if (c.mode == Mode::ReadWrite) {
    streams.back().read = false;
    streams.back().start = w.fileSize / 2 / reqSize * reqSize;
  }
  const std::uint64_t target =
      (w.bytes ? w.bytes : w.fileSize * static_cast<std::uint64_t>(w.files)) / streams.size();

  struct Slot {
    PinnedBufferPool::Lease buf;
    IoHandle handle;
    bool read = false;
    std::size_t file = 0;
    std::uint64_t offset = 0;
    std::size_t len = 0;
  };
  std::vector<Slot> slots(requests);
  std::deque<Slot*> active;
  std::set<std::pair<std::size_t, std::uint64_t>> written;  // for the verify pass after writes
  std::size_t turn = 0;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(w.duration));

  auto issue = [&](Slot& s) -> bool {
    if (w.duration > 0 && Clock::now() >= deadline) return false;
    for (std::size_t tries = 0; tries < streams.size(); ++tries) {
      Stream& st = streams[turn++ % streams.size()];
      if (w.duration <= 0 && st.issued >= target) continue;
      const std::size_t fi = static_cast<std::size_t>(st.chunk % files.size());
      const std::uint64_t pos = (st.start + (st.chunk / files.size()) * reqSize) % w.fileSize;
      const std::uint64_t off = pos / reqSize * reqSize;
      std::uint64_t len = std::min<std::uint64_t>(reqSize, w.fileSize - off);
      if (w.duration <= 0) len = std::min(len, target - st.issued);
      ++st.chunk;
      st.issued += len;
      s.read = st.read;
      s.file = fi;
      s.offset = off;
      s.len = static_cast<std::size_t>(len);
      if (!s.read && w.verify) fillPattern(s.buf.data(), s.len, files_[fi].id, off);
      s.handle = s.read ? engine.read(files[fi], off, s.buf.data(), s.len)
                        : engine.write(files[fi], off, s.buf.data(), s.len);
      if (!s.read && w.verify) written.insert({fi, off});
      return true;
    }
    return false;
  };

  for (auto& s : slots) s.buf = pool.acquire();
  engine.resetStats();
  const auto t0 = Clock::now();
  for (auto& s : slots) {
    if (issue(s)) active.push_back(&s);
  }
  while (!active.empty()) {
    Slot& s = *active.front();
    active.pop_front();
    // Waits for the oldest request; the rings keep working on the others meanwhile.
    s.handle.wait();
    (s.read ? r.readBytes : r.writeBytes) += s.len;
    if (s.read && w.verify) {
      const std::int64_t bad = checkPattern(s.buf.data(), s.len, files_[s.file].id, s.offset);
      r.verifiedBytes += s.len;
      if (bad >= 0) noteMismatch(r, bad, files[s.file]->name(), s.offset);
    }
    if (issue(s)) active.push_back(&s);
    if (progress) {
      progress(w.duration > 0 ? secondsSince(t0) / w.duration
                              : static_cast<double>(r.readBytes + r.writeBytes) /
                                    static_cast<double>(target * streams.size()));
    }
  }
  r.seconds = secondsSince(t0);
  finishResult(r, engine.stats());

  if (w.verify && !written.empty()) {
    // Read back every chunk the run wrote and check every byte.
    Slot& s = slots.front();
    for (const auto& [fi, off] : written) {
      const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(reqSize, w.fileSize - off));
      engine.readSync(files[fi], off, s.buf.data(), len);
      const std::int64_t bad = checkPattern(s.buf.data(), len, files_[fi].id, off);
      r.verifiedBytes += len;
      if (bad >= 0) noteMismatch(r, bad, files[fi]->name(), off);
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The swap pattern of an offloaded optimizer step

RunResult Workspace::runSwap(const RunConfig& c, const std::function<void(double)>& progress) {
  const Workload& w = workload_;
  RunResult r;
  r.config = c;
  r.config.mode = Mode::Swap;
  r.files = static_cast<int>(files_.size());
  r.ranks = w.ranks;
  r.fileSize = w.fileSize;

  const std::uint64_t tile = std::min<std::uint64_t>(alignUp(w.tileSize, 4096), alignUp(w.fileSize, 4096));
  const std::uint64_t tiles = (w.fileSize + tile - 1) / tile;
  const std::uint64_t bytesPerStep = 6 * w.fileSize * static_cast<std::uint64_t>(w.ranks);
  const std::uint64_t steps =
      w.duration > 0 ? ~0ull : std::max<std::uint64_t>(1, w.bytes / bytesPerStep);

  std::mutex mu;  // guards the merged results below
  offload::EngineStats merged;
  offload::LatencyHistogram stepTimes;
  std::exception_ptr firstError;
  std::barrier start(w.ranks + 1);
  std::barrier ready(w.ranks + 1);
  Clock::time_point t0;
  Clock::time_point deadline;

  auto rank = [&](int rk) {
    RunResult mine;
    offload::LatencyHistogram myTimes;
    std::unique_ptr<PinnedBufferPool> pool;
    std::unique_ptr<OffloadEngine> engine;
    std::vector<std::shared_ptr<offload::OffloadFile>> state;  // param, exp_avg, exp_avg_sq
    std::vector<std::uint32_t> ids;
    try {
      pool = std::make_unique<PinnedBufferPool>(*device_, 6, tile, std::nullopt, c.fixedBuffers,
                                                w.hugePages);
      engine = std::make_unique<OffloadEngine>(
          aioFor(c), c.fixedBuffers ? pool->iovecs() : std::vector<iovec>{});
      for (int k = 0; k < 3; ++k) {
        const File& f = files_[static_cast<std::size_t>(rk * 3 + k)];
        state.push_back(reopen(f, c));
        ids.push_back(f.id);
      }
      if (rk == 0) {
        std::lock_guard lock(mu);
        r.engine = engine->describe();
      }
    } catch (...) {
      std::lock_guard lock(mu);
      if (!firstError) firstError = std::current_exception();
    }
    ready.arrive_and_wait();  // every rank set up (or failed)
    start.arrive_and_wait();  // the clock starts
    if (!engine) return;
    try {
      std::vector<PinnedBufferPool::Lease> buf;
      for (int i = 0; i < 6; ++i) buf.push_back(pool->acquire());
      auto sizeOf = [&](std::uint64_t t) {
        return static_cast<std::size_t>(std::min(tile, w.fileSize - t * tile));
      };
      std::vector<IoHandle> writes;
      for (std::uint64_t step = 0; step < steps; ++step) {
        if (w.duration > 0 && Clock::now() >= deadline) break;
        for (std::uint64_t t = 0; t < tiles; ++t) {
          const auto ts = Clock::now();
          const int set = static_cast<int>(t % 2) * 3;
          IoHandle reads[3];
          for (int k = 0; k < 3; ++k)
            reads[k] = engine->read(state[k], t * tile, buf[set + k].data(), sizeOf(t));
          // The previous tile, updated by the optimizer, goes back while this one comes in.
          writes.clear();
          if (t > 0) {
            for (int k = 0; k < 3; ++k)
              writes.push_back(engine->write(state[k], (t - 1) * tile, buf[3 - set + k].data(),
                                             sizeOf(t - 1)));
          }
          for (int k = 0; k < 3; ++k) {
            reads[k].wait();
            mine.readBytes += sizeOf(t);
            if (w.verify) {
              const auto bad = checkPattern(buf[set + k].data(), sizeOf(t), ids[k], t * tile);
              mine.verifiedBytes += sizeOf(t);
              if (bad >= 0) noteMismatch(mine, bad, state[k]->name(), t * tile);
            }
          }
          offload::waitAll(writes);
          if (t > 0) mine.writeBytes += 3 * sizeOf(t - 1);
          myTimes.record(static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - ts).count()));
          if (rk == 0 && progress) {  // one thread reports, for every rank (they keep pace)
            progress(w.duration > 0 ? secondsSince(t0) / w.duration
                                    : static_cast<double>(step * tiles + t + 1) / static_cast<double>(steps * tiles));
          }
        }
        const int last = static_cast<int>((tiles - 1) % 2) * 3;
        writes.clear();
        for (int k = 0; k < 3; ++k)
          writes.push_back(engine->write(state[k], (tiles - 1) * tile, buf[last + k].data(),
                                         sizeOf(tiles - 1)));
        offload::waitAll(writes);
        mine.writeBytes += 3 * sizeOf(tiles - 1);
      }
    } catch (...) {
      std::lock_guard lock(mu);
      if (!firstError) firstError = std::current_exception();
    }
    std::lock_guard lock(mu);
    r.readBytes += mine.readBytes;
    r.writeBytes += mine.writeBytes;
    r.verifiedBytes += mine.verifiedBytes;
    r.verifyErrors += mine.verifyErrors;
    if (r.firstVerifyError.empty()) r.firstVerifyError = mine.firstVerifyError;
    const offload::EngineStats s = engine->stats();
    merged.transfers += s.transfers;
    merged.latency.merge(s.latency);
    stepTimes.merge(myTimes);
  };

  std::vector<std::thread> threads;
  for (int rk = 0; rk < w.ranks; ++rk) threads.emplace_back(rank, rk);
  ready.arrive_and_wait();
  t0 = Clock::now();
  deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.duration));
  start.arrive_and_wait();
  for (auto& t : threads) t.join();
  r.seconds = secondsSince(t0);
  if (firstError) std::rethrow_exception(firstError);
  finishResult(r, merged);
  r.stepP50ms = static_cast<double>(stepTimes.percentileNanos(0.50)) / 1e6;
  r.stepP99ms = static_cast<double>(stepTimes.percentileNanos(0.99)) / 1e6;
  return r;
}

}  // namespace zrt::iotool
