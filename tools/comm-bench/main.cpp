// zrt-comm-bench: collective bandwidth like nccl-tests, run under mpirun. For each operation and
// size it times ZRT's collectives through the MPI path and the shared-memory path, each as a
// blocking call and posted to the progress thread, and, in the same run, the same operation
// through raw MPI calls and a plain memcpy (the copy bound), printing time, algbw, busbw, raw
// MPI's busbw, the ratio and the fraction of the copy bound, and checks every result. --overlap
// measures how much of a bucketed reduce-scatter a simulated backward hides instead. Bad flags:
// the error and exit status 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "comm/mpi_env.h"
#include "core/error.h"
#include "core/units.h"
#include "tools/comm-bench/overlap.h"
#include "tools/comm-bench/sweep.h"

int main(int argc, char** argv) {
  zrt::comm::MpiEnvironment env(&argc, &argv);
  zrt::bench::BenchOptions o;
  o.rank = env.rank();
  o.size = env.size();
  std::string op = "all", path = "both", minBytes = "1K", maxBytes = "256M", dtype = "fp32";
  std::string layerBytes = "4M";

  CLI::App app{"zrt-comm-bench: bandwidth of ZRT's collectives against raw MPI (run under mpirun)"};
  app.add_option("--op", op, "all_reduce, reduce_scatter, all_gather or all")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "all"}));
  app.add_option("--path", path,
                 "ZRT paths to time, in order: mpi, shm, both (= mpi,shm) or a comma list "
                 "(--overlap runs each in turn in this process, e.g. shm,mpi,shm)");
  app.add_option("--min-bytes", minBytes, "smallest size (1K, 4M, ...)");
  app.add_option("--max-bytes", maxBytes, "largest size");
  app.add_option("--step-factor", o.stepFactor, "size multiplier between rows")->check(CLI::Range(2, 1024));
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16");
  app.add_option("--iters", o.iters, "timed iterations per size (fewer for large sizes: at most 512 MiB moved, at least 2)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed iterations first")->check(CLI::Range(0, 1000));
  app.add_flag("--json", o.json, "rank 0 prints one JSON object per line");
  app.add_flag("!--no-check", o.check, "skip the correctness check");
  app.add_flag("--overlap", o.overlap, "measure bucketed reduce-scatter overlapped with a simulated backward");
  app.add_option("--layers", o.layers, "--overlap: layers (buckets)")->check(CLI::Range(1, 100000));
  app.add_option("--layer-bytes", layerBytes, "--overlap: gradient bytes per layer (= bucket)");
  app.add_option("--compute", o.compute, "--overlap: how a layer computes: sleep, spin or both")
      ->check(CLI::IsMember({"sleep", "spin", "both"}));
  app.add_option("--rounds", o.rounds, "--overlap: measurement rounds (medians and spread over them)")
      ->check(CLI::Range(1, 1000));
  try {
    app.parse(argc, argv);
    o.minBytes = zrt::parseBytes(minBytes, "--min-bytes");
    o.maxBytes = zrt::parseBytes(maxBytes, "--max-bytes");
    o.layerBytes = zrt::parseBytes(layerBytes, "--layer-bytes");
    o.dtype = zrt::parseDType(dtype);
    if (o.minBytes == 0 || o.minBytes > o.maxBytes)
      throw zrt::InvalidArgument("--min-bytes must be at least 1 and at most --max-bytes");
    for (std::size_t at = 0; at <= path.size();) {
      const std::size_t end = std::min(path.find(',', at), path.size());
      const std::string p = path.substr(at, end - at);
      if (p == "both") o.paths.insert(o.paths.end(), {"mpi", "shm"});
      else if (p == "mpi" || p == "shm") o.paths.push_back(p);
      else throw zrt::InvalidArgument("--path: '" + p + "' is not mpi, shm or both");
      at = end + 1;
    }
    // The raw MPI calls it compares against take int counts.
    if (o.maxBytes / zrt::dtypeSize(o.dtype) > static_cast<std::uint64_t>(INT_MAX))
      throw zrt::InvalidArgument(zrt::detail::cat(
          "--max-bytes ", maxBytes, " is more than INT_MAX elements of ", dtype,
          ", which the raw MPI calls it is compared with cannot count"));
  } catch (const CLI::CallForHelp& e) {
    return env.rank() == 0 ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (env.rank() == 0) app.exit(e);
    return 2;
  } catch (const zrt::Error& e) {
    if (env.rank() == 0) std::fprintf(stderr, "zrt-comm-bench: %s\n", e.what());
    return 2;
  }
  if (op == "all") o.ops = {"all_reduce", "reduce_scatter", "all_gather"};
  else o.ops = {op};

  try {
    if (o.overlap) {
      zrt::bench::runOverlap(o);
      return 0;
    }
    return zrt::bench::runSweep(o) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zrt-comm-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
