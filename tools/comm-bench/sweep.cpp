#include "tools/comm-bench/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/collective.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/mpi_reduce_ops.h"
#include "comm/mpi_check.h"
#include "core/element_arithmetic.h"
#include "core/timing.h"
#include "core/units.h"
#include "tools/comm-bench/cache_info.h"
#include "tools/comm-bench/copy_bound.h"
#include "tools/comm-bench/single_copy.h"

namespace zrt::bench {
namespace {

using comm::OpKind;
using Clock = std::chrono::steady_clock;

OpKind kindOf(const std::string& op) {
  if (op == "all_reduce") return OpKind::AllReduce;
  if (op == "reduce_scatter") return OpKind::ReduceScatter;
  return OpKind::AllGather;
}

// Buffers of one operation at one size, for every implementation.
struct Buffers {
  std::size_t perRank = 0;  // reduce_scatter: recv count; all_gather: send count
  std::size_t count = 0;    // all_reduce: count; others: perRank * world
  std::vector<char> send, recv;
};

// Integer values: the sum is exact in every dtype and order, so results compare bit for bit.
float value(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 29) - 14);
}

void fill(Buffers& b, OpKind kind, DType dt, int rank) {
  const std::size_t n = kind == OpKind::AllGather ? b.perRank : b.count;
  for (std::size_t i = 0; i < n; ++i) zrt::storeElement(dt, b.send.data(), i, value(rank, i));
}

bool verify(const Buffers& b, OpKind kind, DType dt, int rank, int world) {
  auto sum = [&](std::size_t i) {
    float s = 0;
    for (int r = 0; r < world; ++r) s += value(r, i);
    return s;
  };
  auto rounded = [&](float v) {
    std::uint32_t tmp = 0;
    zrt::storeElement(dt, &tmp, 0, v);
    return zrt::loadElement(dt, &tmp, 0);
  };
  switch (kind) {
    case OpKind::AllReduce:
      for (std::size_t i = 0; i < b.count; ++i)
        if (zrt::loadElement(dt, b.recv.data(), i) != rounded(sum(i))) return false;
      return true;
    case OpKind::ReduceScatter:
      for (std::size_t i = 0; i < b.perRank; ++i)
        if (zrt::loadElement(dt, b.recv.data(), i) !=
            rounded(sum(static_cast<std::size_t>(rank) * b.perRank + i)))
          return false;
      return true;
    default:
      for (int r = 0; r < world; ++r)
        for (std::size_t i = 0; i < b.perRank; ++i)
          if (zrt::loadElement(dt, b.recv.data(), static_cast<std::size_t>(r) * b.perRank + i) !=
              rounded(value(r, i)))
            return false;
      return true;
  }
}

// One run of the operation through raw MPI calls (what an application would write itself).
void rawMpi(OpKind kind, Buffers& b, DType dt, const comm::MpiReduceOps& ops, MPI_Comm c) {
  const MPI_Datatype t = comm::MpiReduceOps::datatype(dt);
  const int n = static_cast<int>(kind == OpKind::AllReduce ? b.count : b.perRank);
  switch (kind) {
    case OpKind::AllReduce:
      ZRT_CHECK_MPI(MPI_Allreduce(b.send.data(), b.recv.data(), n, t, ops.sum(dt), c));
      return;
    case OpKind::ReduceScatter:
      ZRT_CHECK_MPI(MPI_Reduce_scatter_block(b.send.data(), b.recv.data(), n, t, ops.sum(dt), c));
      return;
    default:
      ZRT_CHECK_MPI(MPI_Allgather(b.send.data(), n, t, b.recv.data(), n, t, c));
      return;
  }
}

void zrtOp(OpKind kind, Buffers& b, DType dt, comm::MpiCommunicator& c, char* send, char* recv) {
  switch (kind) {
    case OpKind::AllReduce: c.allReduce(send, recv, b.count, dt); return;
    case OpKind::ReduceScatter: c.reduceScatter(send, recv, b.perRank, dt); return;
    default: c.allGather(send, recv, b.perRank, dt); return;
  }
}

// The asynchronous path the bucketers take: post to the progress thread, then wait. The blocking
// call above may run on the caller's thread when nothing is queued, which skips the hand-off.
void zrtOpAsync(OpKind kind, Buffers& b, DType dt, comm::MpiCommunicator& c, char* send, char* recv) {
  switch (kind) {
    case OpKind::AllReduce: c.allReduceAsync(send, recv, b.count, dt).wait(); return;
    case OpKind::ReduceScatter: c.reduceScatterAsync(send, recv, b.perRank, dt).wait(); return;
    default: c.allGatherAsync(send, recv, b.perRank, dt).wait(); return;
  }
}

// One way of running ZRT's collective: a path, with the caller's buffers or with buffers from
// Communicator::allocateBuffer (shared windows the shm path reads in place), blocking or posted.
struct Impl {
  std::string path;
  bool registered;
  bool async;
  std::string name() const { return path + (registered ? "+reg" : "") + (async ? "-async" : ""); }
};

// One printed row: ZRT's collective (path mpi or shm), raw MPI's ("raw") or the memcpy
// yardstick ("memcpy").
struct Row {
  std::string op, path;
  bool registered = false, async = false;
  std::uint64_t bytes = 0;
  double seconds = 0, mpiSeconds = 0;
  double boundSeconds = 0;  // 0: none (the memcpy row)
  const char* cache = "mem";
  std::optional<bool> correct;  // empty: not checked
};

void printRow(const Row& row, OpKind kind, int n, bool json, const std::string& singleCopy,
              DType dt) {
  const bool copyRow = row.path == "memcpy", rawRow = row.path == "raw";
  const double algbw = static_cast<double>(row.bytes) / row.seconds / 1e9;
  const double busbw = copyRow ? 0 : algbw * comm::busFactor(kind, n);
  const double mpiBusbw =
      copyRow ? 0 : static_cast<double>(row.bytes) / row.mpiSeconds / 1e9 * comm::busFactor(kind, n);
  const double ratio = copyRow || rawRow || mpiBusbw <= 0 ? 0 : busbw / mpiBusbw;
  const double ofBound = row.boundSeconds > 0 ? row.boundSeconds / row.seconds : 0;
  if (json) {
    nlohmann::json j = {{"op", row.op},
                        {"path", row.path},
                        {"registered", row.registered},
                        {"async", row.async},
                        {"bytes", row.bytes},
                        {"dtype", nameOf(dt)},
                        {"ranks", n},
                        {"time_us", row.seconds * 1e6},
                        {"algbw_gbps", algbw},
                        {"cache", row.cache},
                        {"single_copy", singleCopy}};
    if (copyRow) {
      j["copy_gbps"] = algbw;  // bytes copied per second per rank, all ranks copying at once
    } else {
      j["busbw_gbps"] = busbw;
      j["mpi_time_us"] = row.mpiSeconds * 1e6;
      j["mpi_busbw_gbps"] = mpiBusbw;
      j["ratio"] = rawRow ? nlohmann::json(nullptr) : nlohmann::json(ratio);
      j["bound_us"] = row.boundSeconds * 1e6;
      j["of_bound"] = ofBound;
    }
    j["correct"] = row.correct ? nlohmann::json(*row.correct) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  auto num = [](double v, const char* fmt, bool show) {
    char text[32] = "-";
    if (show) std::snprintf(text, sizeof text, fmt, v);
    return std::string(text);
  };
  const std::string name = Impl{row.path, row.registered, row.async}.name();
  std::printf("%-15s %12llu %-14s %12.1f %10.3f %10s %10s %7s %10s %8s %5s %8s\n", row.op.c_str(),
              static_cast<unsigned long long>(row.bytes), name.c_str(), row.seconds * 1e6,
              algbw, num(busbw, "%.3f", !copyRow).c_str(), num(mpiBusbw, "%.3f", !copyRow).c_str(),
              num(ratio, "%.2f", !copyRow && !rawRow).c_str(),
              num(row.boundSeconds * 1e6, "%.1f", !copyRow).c_str(),
              num(ofBound, "%.2f", !copyRow).c_str(), row.cache,
              row.correct ? (*row.correct ? "yes" : "NO") : "-");
}

}  // namespace

bool runSweep(const BenchOptions& o) {
  const comm::MpiCommHandle worldComm = comm::MpiCommHandle::dup(MPI_COMM_WORLD);
  const MPI_Comm world = worldComm.get();
  const int n = o.size, me = o.rank;
  const std::size_t es = dtypeSize(o.dtype);
  comm::MpiReduceOps ops;
  const std::string singleCopy = singleCopyMechanism();
  const CacheSizes caches = readCacheSizes();

  std::vector<std::string> paths;  // each once, in the order given
  for (const std::string& p : o.paths)
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  std::map<std::string, std::unique_ptr<comm::MpiCommunicator>> comms;
  for (const std::string& p : paths) {
    comm::CommOptions co = comm::CommOptions::fromEnvironment();
    co.path = comm::parseCommPath(p);
    comms[p] = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, co);
  }
  const bool shmReal = comms.count("shm") && comms["shm"]->hasSharedMemory();
  std::vector<Impl> impls;
  for (const std::string& p : paths) {
    for (bool async : {false, true}) {
      impls.push_back({p, false, async});
      if (p == "shm" && shmReal) impls.push_back({p, true, async});
    }
  }
  if (me == 0 && !o.json) {
    std::printf("# zrt-comm-bench: %d rank(s), %d node(s), %s, iters %d (at most %s moved per "
                "size and implementation), warmup %d\n",
                n, (comms.count("shm") ? comms["shm"] : comms.begin()->second)->numNodes(),
                std::string(nameOf(o.dtype)).c_str(), o.iters,
                formatBytes(o.itersBytesCap).c_str(), o.warmup);
    std::printf("# single-copy: %s\n", singleCopy.c_str());
    std::printf("# caches: L2 %s per core, L3 %s; cache column: L2 = one rank's buffers fit its "
                "L2, L3 = all ranks' buffers fit the L3, mem = neither (measures memory)\n",
                caches.l2 ? formatBytes(caches.l2).c_str() : "unknown",
                caches.l3 ? formatBytes(caches.l3).c_str() : "unknown");
    if (comms.count("shm") && !shmReal)
      std::printf("# no node holds several ranks: the shm rows run the MPI path\n");
    std::printf("# busbw as nccl-tests (GB/s); raw: the same operation through raw MPI calls, "
                "same run; ratio = busbw / mpi_busbw; +reg: buffers from allocateBuffer (shared "
                "windows, read in place); -async: posted to the progress thread and waited for "
                "(what the bucketers do), else the blocking call\n");
    std::printf("# memcpy: every rank copies `bytes` at once (algbw = bytes copied per s per "
                "rank); bound_us = the least traffic one rank must move (all_reduce: read N, "
                "write N; reduce_scatter: read N, write N/n; all_gather: read N/n, write N; N = "
                "bytes, n = ranks) at memcpy's rate, reads and writes priced alike; of_bound = "
                "bound_us / time_us (1 = at the copy bound)\n");
    std::printf("%-15s %12s %-14s %12s %10s %10s %10s %7s %10s %8s %5s %8s\n", "op", "bytes",
                "path", "time_us", "algbw", "busbw", "mpi_busbw", "ratio", "bound_us", "of_bound",
                "cache", "correct");
  }
  bool allCorrect = true;
  for (const std::string& opName : o.ops) {
    const OpKind kind = kindOf(opName);
    for (std::uint64_t bytes = o.minBytes; bytes <= o.maxBytes;
         bytes *= static_cast<std::uint64_t>(o.stepFactor)) {
      Buffers b;
      if (kind == OpKind::AllReduce) {
        b.count = std::max<std::size_t>(1, bytes / es);
        b.perRank = b.count;
      } else {
        b.perRank = std::max<std::size_t>(1, bytes / es / static_cast<std::size_t>(n));
        b.count = b.perRank * static_cast<std::size_t>(n);
      }
      const std::size_t sendCount = kind == OpKind::AllGather ? b.perRank : b.count;
      const std::size_t recvCount = kind == OpKind::ReduceScatter ? b.perRank : b.count;
      b.send.assign(sendCount * es, 0);
      b.recv.assign(recvCount * es, 0);
      fill(b, kind, o.dtype, me);
      comm::CommBuffer regSend, regRecv;
      if (shmReal) {  // collective: every rank allocates
        regSend = comms["shm"]->allocateBuffer(b.send.size());
        regRecv = comms["shm"]->allocateBuffer(b.recv.size());
        std::memcpy(regSend.data(), b.send.data(), b.send.size());
      }
      auto sendOf = [&](const Impl& im) { return im.registered ? regSend.as<char>() : b.send.data(); };
      auto recvOf = [&](const Impl& im) { return im.registered ? regRecv.as<char>() : b.recv.data(); };
      const std::uint64_t realBytes = static_cast<std::uint64_t>(b.count) * es;
      // The yardstick copies the full buffer on every rank: its own pages, touched here first.
      std::vector<char> copySrc(realBytes, 1), copyDst(realBytes, 0);
      const int iters = static_cast<int>(std::clamp<std::uint64_t>(
          o.itersBytesCap / std::max<std::uint64_t>(1, realBytes), 2, static_cast<std::uint64_t>(o.iters)));

      // Times `iters` runs of `fn` after the warmup; the slowest rank's mean.
      auto time = [&](auto&& fn) {
        for (int i = 0; i < o.warmup; ++i) fn();
        ZRT_CHECK_MPI(MPI_Barrier(world));
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) fn();
        const double s = secondsSince(t0) / iters;
        return maxOverRanks(s, world);
      };
      auto copy = [&] {
        std::memcpy(copyDst.data(), copySrc.data(), realBytes);
        // The copy's result is never read: tell the compiler memory changed so it stays.
        asm volatile("" : : "r"(copyDst.data()) : "memory");
      };
      // Three rounds of every implementation, interleaved; the best of the three for each.
      std::map<std::string, double> best;
      auto keep = [&](const std::string& name, double t, int round) {
        best[name] = round == 0 ? t : std::min(best[name], t);
      };
      for (int round = 0; round < 3; ++round) {
        keep("memcpy", time(copy), round);
        keep("raw", time([&] { rawMpi(kind, b, o.dtype, ops, world); }), round);
        for (const Impl& im : impls) {
          comm::MpiCommunicator& c = *comms[im.path];
          const double t = im.async
                               ? time([&] { zrtOpAsync(kind, b, o.dtype, c, sendOf(im), recvOf(im)); })
                               : time([&] { zrtOp(kind, b, o.dtype, c, sendOf(im), recvOf(im)); });
          keep(im.name(), t, round);
        }
      }
      const double bound = boundSeconds(trafficPerRank(kind, realBytes, n), realBytes, best["memcpy"]);
      // One rank's buffers: send + recv (the collective), source + destination (the copy).
      const char* cache = cacheLevel(caches, b.send.size() + b.recv.size(), n);
      if (me == 0) {
        Row copyRow{opName, "memcpy", false, false, realBytes, best["memcpy"], best["raw"], 0,
                    cacheLevel(caches, 2 * realBytes, n), std::nullopt};
        printRow(copyRow, kind, n, o.json, singleCopy, o.dtype);
        Row rawRow{opName, "raw", false, false, realBytes, best["raw"], best["raw"], bound, cache,
                   std::nullopt};
        printRow(rawRow, kind, n, o.json, singleCopy, o.dtype);
      }
      for (const Impl& im : impls) {
        Row row{opName, im.path, im.registered, im.async, realBytes, best[im.name()],
                best["raw"], bound, cache, std::nullopt};
        if (o.check) {
          std::memset(recvOf(im), 0, b.recv.size());
          comm::MpiCommunicator& c = *comms[im.path];
          if (im.async) zrtOpAsync(kind, b, o.dtype, c, sendOf(im), recvOf(im));
          else zrtOp(kind, b, o.dtype, c, sendOf(im), recvOf(im));
          if (im.registered) std::memcpy(b.recv.data(), regRecv.data(), b.recv.size());
          row.correct = allRanksTrue(verify(b, kind, o.dtype, me, n), world);
          allCorrect = allCorrect && *row.correct;
        }
        if (me == 0) printRow(row, kind, n, o.json, singleCopy, o.dtype);
        std::fflush(stdout);
      }
    }
  }
  comms.clear();
  return allCorrect;
}

}  // namespace zrt::bench
