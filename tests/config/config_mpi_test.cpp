// Every rank loads the same config with the MPI world size; all must resolve the same batch
// sizes (checked against train = micro * accumulation * world size) and fail alike on a
// contradiction.
#include <doctest/doctest.h>
#include <mpi.h>

#include <vector>

#include "core/config/config.h"
#include "tests/config/config_test_util.h"
#include "tests/support/mpi_test.h"

using namespace zrt;

namespace {

// Gathers one row of values per rank and checks every rank's row equals rank 0's.
bool allRanksAgree(const std::vector<std::int64_t>& mine) {
  const int world = test::worldSize();
  std::vector<std::int64_t> all(mine.size() * world);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                static_cast<int>(mine.size()), MPI_INT64_T, test::testComm());
  for (int r = 1; r < world; ++r)
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (all[r * mine.size() + i] != all[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("each rank resolves the shipped ZeRO-2 config to the same batch sizes") {
  const int world = test::worldSize();
  ConfigOverrides o;
  o.train_micro_batch_size_per_gpu = 2;
  o.gradient_accumulation_steps = 3;
  Config c = loadConfig(test::shippedConfig("zero2.json"), world, o);
  CHECK(c.world_size == world);
  CHECK(c.train_batch_size == 2 * 3 * world);
  std::vector<std::int64_t> mine = {c.train_batch_size,
                                    c.train_micro_batch_size_per_gpu,
                                    c.gradient_accumulation_steps,
                                    c.zero_optimization.stage,
                                    c.zero_optimization.reduce_bucket_size,
                                    c.fp16.enabled ? 1 : 0};
  CHECK(allRanksAgree(mine));
}

TEST_CASE("a fixed train batch is split by the world size the same way on every rank") {
  const int world = test::worldSize();
  Config c = parseConfig(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})",
                         "mpi.json", world);
  CHECK(c.gradient_accumulation_steps == 16 / 2 / world);
  CHECK(c.train_batch_size ==
        c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * world);
  CHECK(allRanksAgree(
      {c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps}));
}

TEST_CASE("a contradiction fails on every rank, naming the world size") {
  const int world = test::worldSize();
  // 6 samples cannot be split into micro-batches of 4 on any world size.
  bool threw = false;
  try {
    parseConfig(R"({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 4})", "mpi.json",
                world);
  } catch (const ConfigError& e) {
    threw = test::contains(e.what(), detail::cat("world size ", world));
  }
  CHECK(test::allRanks(threw));
}
