// Collective descriptors: validation messages, byte counts and the nccl-tests bus factors.
#include <doctest/doctest.h>

#include <string>

#include "comm/collective.h"
#include "runtime/error.h"

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
