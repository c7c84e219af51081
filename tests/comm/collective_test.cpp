// Collective descriptors: validation messages, byte counts and the nccl-tests bus factors.
#include <doctest/doctest.h>

#include <string>

#include "comm/collective.h"
#include "core/error.h"

using namespace zrt;
using namespace zrt::comm;

TEST_CASE("bus factors follow nccl-tests") {
  CHECK(busFactor(OpKind::AllReduce, 4) == doctest::Approx(1.5));
  CHECK(busFactor(OpKind::ReduceScatter, 4) == doctest::Approx(0.75));
  CHECK(busFactor(OpKind::AllGather, 2) == doctest::Approx(0.5));
  CHECK(busFactor(OpKind::AllReduce, 1) == 0.0);
}

TEST_CASE("bytes count the full buffer") {
  Collective op;
  op.kind = OpKind::ReduceScatter;
  op.dtype = DType::BF16;
  op.counts = {3, 0, 5};
  CHECK(opBytes(op) == 16);
  CHECK(segmentOffset(op, 2) == 3);
  op.kind = OpKind::AllReduce;
  op.count = 10;
  CHECK(opBytes(op) == 20);
}

TEST_CASE("the bytes of send and recv one rank's part reads and writes") {
  Collective op;
  op.dtype = DType::BF16;
  op.kind = OpKind::ReduceScatter;
  op.counts = {3, 0, 5};
  CHECK(bufferBytes(op, 0).send == 16);
  CHECK(bufferBytes(op, 0).recv == 6);
  CHECK(bufferBytes(op, 1).recv == 0);
  op.kind = OpKind::AllGather;  // rank 2's piece; recv runs to the furthest segment's end
  op.displs = {10, 0, 3};
  CHECK(bufferBytes(op, 2).send == 10);
  CHECK(bufferBytes(op, 2).recv == 26);
  op.kind = OpKind::Broadcast;  // the root's input is its recv
  op.count = 7;
  CHECK(bufferBytes(op, 0).send == 0);
  CHECK(bufferBytes(op, 0).recv == 14);
  op.kind = OpKind::AllReduce;
  CHECK(bufferBytes(op, 1).send == 14);
  CHECK(bufferBytes(op, 1).recv == 14);
  op.kind = OpKind::Barrier;
  CHECK(bufferBytes(op, 0).send + bufferBytes(op, 0).recv == 0);
}

TEST_CASE("validation names the problem") {
  std::vector<float> buf(64);
  Collective op;
  op.kind = OpKind::AllGather;
  op.send = buf.data();
  op.recv = buf.data() + 32;
  op.counts = {4, 4};
  op.displs = {0, 2};
  try {
    validate(op, 0, 2);
    FAIL("overlapping segments accepted");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("ranks 0 and 1 overlap") != std::string::npos);
  }
  op.displs = {0, 4};
  CHECK_NOTHROW(validate(op, 0, 2));
  op.counts = {4};
  CHECK_THROWS_AS(validate(op, 0, 2), InvalidArgument);

  Collective rs;
  rs.kind = OpKind::ReduceScatter;
  rs.send = buf.data();
  rs.counts = {4, 4};
  rs.recv = buf.data() + 4;  // rank 1's segment: in place
  CHECK(isInPlace(rs, 1));
  CHECK_NOTHROW(validate(rs, 1, 2));
  CHECK_THROWS_AS(validate(rs, 0, 2), InvalidArgument);  // overlaps but is not rank 0's segment
  rs.counts = {0, 0};
  rs.send = nullptr;
  rs.recv = nullptr;
  CHECK_NOTHROW(validate(rs, 0, 2));  // zero-sized: no buffers needed
}

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "comm/comm_options.h"
#include "comm/comm_stats.h"

TEST_CASE("statistics: calls, bytes, time, algbw and busbw per kind") {
  CommStats s(4);
  s.record(OpKind::AllReduce, 1000000000, 0.5);
  s.record(OpKind::AllReduce, 1000000000, 1.5);
  s.record(OpKind::AllGather, 400, 0.0);
  const OpStats a = s.get(OpKind::AllReduce);
  CHECK(a.calls == 2);
  CHECK(a.bytes == 2000000000);
  CHECK(a.algbwGBps() == doctest::Approx(1.0));
  CHECK(busbwGBps(a, OpKind::AllReduce, 4) == doctest::Approx(1.5));
  CHECK(s.get(OpKind::AllGather).algbwGBps() == 0.0);  // nothing timed
  CHECK(s.table().find("allReduce") != std::string::npos);
  CHECK(s.table().find("reduceScatter") == std::string::npos);  // kinds that never ran are left out
  CHECK(s.toJson()["allReduce"]["busbw_gbps"].get<double>() == doctest::Approx(1.5));
  s.reset();
  CHECK(s.get(OpKind::AllReduce).calls == 0);
}

TEST_CASE("options from the environment, and bad values named") {
  ::setenv("ZRT_COMM_PATH", "shm", 1);
  ::setenv("ZRT_COMM_SHM_BYTES", "2M", 1);
  ::setenv("ZRT_COMM_TIMEOUT_S", "7.5", 1);
  CommOptions o = CommOptions::fromEnvironment();
  CHECK(o.path == CommPath::Shm);
  CHECK(o.shmBytes == (std::size_t{2} << 20));
  CHECK(o.timeout == std::chrono::milliseconds(7500));
  ::setenv("ZRT_COMM_PATH", "fast", 1);
  try {
    CommOptions::fromEnvironment();
    FAIL("accepted ZRT_COMM_PATH=fast");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("ZRT_COMM_PATH='fast'") != std::string::npos);
  }
  ::unsetenv("ZRT_COMM_PATH");
  ::setenv("ZRT_COMM_TIMEOUT_S", "-1", 1);
  CHECK_THROWS_AS(CommOptions::fromEnvironment(), InvalidArgument);
  ::setenv("ZRT_COMM_TIMEOUT_S", "0.0001", 1);  // positive but under a millisecond: 1 ms, not 0
  CHECK(CommOptions::fromEnvironment().timeout == std::chrono::milliseconds(1));
  ::setenv("ZRT_COMM_TIMEOUT_S", "1e300", 1);  // beyond a long long of milliseconds: capped
  CHECK(CommOptions::fromEnvironment().timeout > std::chrono::hours(24 * 365));
  ::unsetenv("ZRT_COMM_TIMEOUT_S");
  ::unsetenv("ZRT_COMM_SHM_BYTES");
  CHECK(CommOptions::fromEnvironment(30.0).timeout == std::chrono::seconds(30));
}
