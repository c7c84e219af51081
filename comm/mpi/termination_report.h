// What each MPI communicator of this process is waiting for, kept where a signal handler can read
// it, so a rank ended by SIGINT/SIGTERM says what it was doing and which peers had exited. That
// is what a job looks like when one rank is SIGKILLed: mpirun ends the others with SIGTERM
// within a second, before any timeout, and each of them prints (one line per communicator):
//   [zrt rank 0] error: peer lost: rank 1 (pid 4242) exited while this rank waited 2.1 s in
//   allGather #31 (12.00 KiB bf16, path mpi) (12288 bytes); ended by SIGTERM
// The Watchdog owns one slot per communicator and publishes into it at each poll (every 20 ms);
// the report is a core/termination.h hook (async-signal-safe: atomics, poll, write).
// Thread-safety: publish() from the watchdog's thread; the report from any thread or a handler.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace zrt::comm {

class PeerLiveness;

// Text built without allocation (usable in a signal handler); cut short when full.
struct SignalSafeText {
  char data[1024];
  std::size_t size = 0;
  SignalSafeText() { data[0] = '\0'; }
  SignalSafeText& add(const char* s) noexcept;
  SignalSafeText& add(std::uint64_t v) noexcept;
  SignalSafeText& addSeconds(double s) noexcept;  // one decimal
};

// One lost-peer sentence, shared by the watchdog's report and the signal-time report:
// "peer lost: rank 1 (pid 4242) exited while this rank waited 2.1 s in <op> (<bytes> bytes)"
// or, outside a collective, "...exited; this rank was not in a collective (<n> finished)". A peer
// on another host is named with it: "rank 1 (pid 4242 on host b)". `ranks` and `pids` hold
// `lost` entries; `hosts` too (null or empty for a peer on this host), or is null.
void describeLostPeers(SignalSafeText& out, const int* ranks, const long* pids,
                       const char* const* hosts, int lost, bool running, const char* operation,
                       std::uint64_t bytes, double waitedSeconds, std::uint64_t completed) noexcept;

class TerminationReportSlot {
 public:
  // Registers this communicator's slot (the report hook on first use); `peers` must outlive it:
  // the slot copies its descriptors.
  TerminationReportSlot(const PeerLiveness& peers, const std::vector<int>& worldRanks);
  ~TerminationReportSlot();
  TerminationReportSlot(const TerminationReportSlot&) = delete;
  TerminationReportSlot& operator=(const TerminationReportSlot&) = delete;

  // What the communicator is doing now: an operation in flight (running) or not.
  void publish(bool running, std::uint64_t seq, std::uint64_t completed, const std::string& description,
               std::uint64_t bytes, std::chrono::steady_clock::time_point since) noexcept;
  // The watchdog reported this communicator's failure itself: the signal-time report skips it.
  void markReported() noexcept;
  // As markReported, for a lost peer: true for the first communicator of this process to claim
  // it (that one prints the report), false when another watchdog or the signal-time report has
  // named the lost peers already.
  bool claimLossReport() noexcept;

 private:
  int slot_ = -1;
};

}  // namespace zrt::comm
