// An error every rank agreed on. When a library above comm/ has every rank learn that some rank
// failed and all of them throw the same error (runtime/collective_failure.h), the ranks unwind
// together: none is left waiting in a collective, so the "unwinding while its peers may still be
// in the collectives" warning (mpi/left_peers.h) would be wrong on every rank. The thrower says
// so just before throwing; the teardown still takes the unwinding path (the ranks' destructors
// need not run in the same order), only the warning goes. The mark lasts until clearAgreedFailure
// (the caller's next call into the library: the error was caught and life went on).
// Thread-safety: any thread; the reads are lock-free.
#pragma once

namespace zrt::comm {

void markAgreedFailure() noexcept;
void clearAgreedFailure() noexcept;
bool agreedFailure() noexcept;

}  // namespace zrt::comm
