#include "tools/comm-bench/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/collective.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/mpi/mpi_reduce_ops.h"
#include "comm/mpi_check.h"
#include "comm/reduce_kernels.h"
#include "core/timing.h"
#include "core/units.h"

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
  for (std::size_t i = 0; i < n; ++i) comm::storeElement(dt, b.send.data(), i, value(rank, i));
}

bool verify(const Buffers& b, OpKind kind, DType dt, int rank, int world) {
  auto sum = [&](std::size_t i) {
    float s = 0;
    for (int r = 0; r < world; ++r) s += value(r, i);
    return s;
  };
  auto rounded = [&](float v) {
    std::uint32_t tmp = 0;
    comm::storeElement(dt, &tmp, 0, v);
    return comm::loadElement(dt, &tmp, 0);
  };
  switch (kind) {
    case OpKind::AllReduce:
      for (std::size_t i = 0; i < b.count; ++i)
        if (comm::loadElement(dt, b.recv.data(), i) != rounded(sum(i))) return false;
      return true;
    case OpKind::ReduceScatter:
      for (std::size_t i = 0; i < b.perRank; ++i)
        if (comm::loadElement(dt, b.recv.data(), i) !=
            rounded(sum(static_cast<std::size_t>(rank) * b.perRank + i)))
          return false;
      return true;
    default:
      for (int r = 0; r < world; ++r)
        for (std::size_t i = 0; i < b.perRank; ++i)
          if (comm::loadElement(dt, b.recv.data(), static_cast<std::size_t>(r) * b.perRank + i) !=
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

// One way of running ZRT's collective: a path, with the caller's buffers or with buffers from
// Communicator::allocateBuffer (shared windows the shm path reads in place).
struct Impl {
  std::string path;
  bool registered;
  std::string name() const { return registered ? path + "+reg" : path; }
};

struct Row {
  std::string op, path;
  bool registered = false;
  std::uint64_t bytes = 0;
  double seconds = 0, mpiSeconds = 0;
  bool correct = true;
};

}  // namespace

bool runSweep(const BenchOptions& o) {
  const comm::MpiCommHandle worldComm = comm::MpiCommHandle::dup(MPI_COMM_WORLD);
  const MPI_Comm world = worldComm.get();
  const int n = o.size, me = o.rank;
  const std::size_t es = dtypeSize(o.dtype);
  comm::MpiReduceOps ops;

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
    impls.push_back({p, false});
    if (p == "shm" && shmReal) impls.push_back({p, true});
  }
  if (me == 0 && !o.json) {
    std::printf("# zrt-comm-bench: %d rank(s), %d node(s), %s, iters %d (at most %s moved per "
                "size and implementation), warmup %d\n",
                n, (comms.count("shm") ? comms["shm"] : comms.begin()->second)->numNodes(),
                std::string(nameOf(o.dtype)).c_str(), o.iters,
                formatBytes(o.itersBytesCap).c_str(), o.warmup);
    if (comms.count("shm") && !shmReal)
      std::printf("# no node holds several ranks: the shm rows run the MPI path\n");
    std::printf("# busbw as nccl-tests (GB/s); mpi_busbw: the same operation through raw MPI calls, "
                "same run; ratio = busbw / mpi_busbw; path +reg: buffers from allocateBuffer "
                "(shared windows, read in place)\n");
    std::printf("%-15s %12s %8s %12s %10s %10s %10s %7s %8s\n", "op", "bytes", "path", "time_us",
                "algbw", "busbw", "mpi_busbw", "ratio", "correct");
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
      // Three rounds of every implementation, interleaved; the best of the three for each.
      std::map<std::string, double> best;
      for (int round = 0; round < 3; ++round) {
        const double raw = time([&] { rawMpi(kind, b, o.dtype, ops, world); });
        best["raw"] = round == 0 ? raw : std::min(best["raw"], raw);
        for (const Impl& im : impls) {
          const double t = time([&] { zrtOp(kind, b, o.dtype, *comms[im.path], sendOf(im), recvOf(im)); });
          best[im.name()] = round == 0 ? t : std::min(best[im.name()], t);
        }
      }
      for (const Impl& im : impls) {
        Row row{opName, im.path, im.registered, realBytes, best[im.name()], best["raw"], true};
        if (o.check) {
          std::memset(recvOf(im), 0, b.recv.size());
          zrtOp(kind, b, o.dtype, *comms[im.path], sendOf(im), recvOf(im));
          if (im.registered) std::memcpy(b.recv.data(), regRecv.data(), b.recv.size());
          row.correct = allRanksTrue(verify(b, kind, o.dtype, me, n), world);
          allCorrect = allCorrect && row.correct;
        }
        if (me != 0) continue;
        const double algbw = static_cast<double>(row.bytes) / row.seconds / 1e9;
        const double busbw = algbw * comm::busFactor(kind, n);
        const double mpiBusbw =
            static_cast<double>(row.bytes) / row.mpiSeconds / 1e9 * comm::busFactor(kind, n);
        const double ratio = mpiBusbw > 0 ? busbw / mpiBusbw : 0;
        if (o.json) {
          nlohmann::json j = {{"op", row.op},
                              {"path", row.path},
                              {"registered", row.registered},
                              {"bytes", row.bytes},
                              {"dtype", nameOf(o.dtype)},
                              {"ranks", n},
                              {"time_us", row.seconds * 1e6},
                              {"algbw_gbps", algbw},
                              {"busbw_gbps", busbw},
                              {"mpi_time_us", row.mpiSeconds * 1e6},
                              {"mpi_busbw_gbps", mpiBusbw},
                              {"ratio", ratio},
                              {"correct", row.correct}};
          if (!o.check) j["correct"] = nullptr;
          std::printf("%s\n", j.dump().c_str());
        } else {
          char ratioText[16] = "-";
          if (mpiBusbw > 0) std::snprintf(ratioText, sizeof ratioText, "%.2f", ratio);
          std::printf("%-15s %12llu %8s %12.1f %10.3f %10.3f %10.3f %7s %8s\n", row.op.c_str(),
                      static_cast<unsigned long long>(row.bytes), im.name().c_str(),
                      row.seconds * 1e6, algbw, busbw, mpiBusbw, ratioText,
                      o.check ? (row.correct ? "yes" : "NO") : "-");
        }
        std::fflush(stdout);
      }
    }
  }
  comms.clear();
  return allCorrect;
}

}  // namespace zrt::bench
