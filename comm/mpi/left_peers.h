// Leaving the peers on an exception. A rank whose own code throws in the middle of a step unwinds
// through destructors that would free MPI windows and communicators, which are collective: its
// peers are still in the step's collectives, so those frees (and MPI_Finalize after them) would
// wait for them forever, and the rank's error message, printed once the unwinding is over, would
// never appear. So a collective teardown that runs while an exception unwinds is skipped (the
// process is ending: only MPI's own memory is left behind), the process is marked as having left
// its peers, and MpiEnvironment then gives MPI_Finalize a bounded grace: ranks that all threw the
// same agreed error finalise together within it; a rank whose peers are elsewhere says so and
// ends, and the launcher ends the job (each peer reports the lost rank and the operation it was
// waiting in: termination_report.h).
// Thread-safety: any thread; leftPeers() is a lock-free read.
#pragma once

#include <chrono>

namespace zrt::comm {

// True when called while an exception unwinds the stack of a rank with peers (a world of more
// than one rank; one alone frees as usual): the caller skips its collective MPI call (`what`,
// for the one log line, left out when every rank threw the same agreed error: agreed_failure.h)
// and the process is marked as having left its peers. Also true, without marking, once a peer
// was lost (peer_loss.h).
bool skipCollectiveTeardown(const char* what) noexcept;

// The process is ending on an error raised outside any teardown (a Python program's unhandled
// exception after its engines were closed, say) while its peers may be waiting for it in a
// collective, e.g. a communicator's creation: marks it as having left them, so MPI_Finalize gets
// the bounded grace instead of waiting for them forever, and says so once (`why` names the
// error's kind). Does nothing where MPI is not initialised or this rank is alone.
void leavePeers(const char* why) noexcept;

// Whether a collective teardown was skipped in this process, or leavePeers was called.
bool leftPeers() noexcept;

// How long MPI_Finalize may wait for the peers of a rank that left them: ZRT_UNWIND_GRACE_S
// (seconds, default 10).
std::chrono::milliseconds unwindGrace();

}  // namespace zrt::comm
