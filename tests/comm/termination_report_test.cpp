// The text a rank prints when a peer is lost (comm/mpi/termination_report.h), built without
// allocation so a signal handler can build it: the lost ranks with their pids, the operation
// waited in with its bytes and the time waited, or that no collective was in flight; the host of
// a peer on another host.
#include <doctest/doctest.h>

#include <string>

#include "comm/mpi/termination_report.h"

using zrt::comm::describeLostPeers;
using zrt::comm::SignalSafeText;

TEST_CASE("the lost-peer sentence names each lost rank, its pid, the operation and the wait") {
  const int ranks[] = {1, 3};
  const long pids[] = {4242, 4250};
  SignalSafeText one;
  describeLostPeers(one, ranks, pids, nullptr, 1, true, "allGather #31 (12.00 KiB bf16, path mpi)",
                    12288, 2.06, 30);
  CHECK(std::string(one.data) ==
        "peer lost: rank 1 (pid 4242) exited while this rank waited 2.1 s in "
        "allGather #31 (12.00 KiB bf16, path mpi) (12288 bytes)");
  SignalSafeText two;
  describeLostPeers(two, ranks, pids, nullptr, 2, false, "", 0, 0, 30);
  CHECK(std::string(two.data) ==
        "peers lost: rank 1 (pid 4242), rank 3 (pid 4250) exited; this rank was not in a collective (30 finished)");
}

TEST_CASE("a lost peer on another host is named with its host; one on this host is not") {
  const int ranks[] = {1, 3};
  const long pids[] = {4242, 4250};
  const char* hosts[] = {"", "node-b"};
  SignalSafeText t;
  describeLostPeers(t, ranks, pids, hosts, 2, true, "allReduce #4 (16 B fp32, path mpi)", 16, 1.0,
                    3);
  CHECK(std::string(t.data) ==
        "peers lost: rank 1 (pid 4242), rank 3 (pid 4250 on host node-b) exited while this rank "
        "waited 1.0 s in "
        "allReduce #4 (16 B fp32, path mpi) (16 bytes)");
}

TEST_CASE("signal-safe text: numbers, tenths of seconds, and a full buffer cut short") {
  SignalSafeText t;
  t.add("x=").add(std::uint64_t{0}).add(" y=").add(std::uint64_t{18446744073709551615ull});
  t.add(" s=").addSeconds(0.04).add(" ").addSeconds(59.96).add(" ").addSeconds(-1);
  CHECK(std::string(t.data) == "x=0 y=18446744073709551615 s=0.0 60.0 0.0");
  SignalSafeText full;
  for (int i = 0; i < 2000; ++i) full.add("ab");
  CHECK(full.size == sizeof full.data - 1);
  CHECK(std::string(full.data).size() == full.size);
}
