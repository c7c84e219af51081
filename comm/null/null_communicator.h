// NullCommunicator: a backend that validates every operation and completes it at once without
// moving a byte. Running the same step through it and through a real backend tells what the
// communication cost that was not hidden behind compute (zrt-comm-bench --overlap,
// zrt-engine-bench). Results are meaningless: no rank's data reaches another, and an all-gather
// does not even copy this rank's own part.
// Thread-safety: as Communicator.
#pragma once

#include "comm/communicator.h"

namespace zrt::comm {

class NullCommunicator final : public Communicator {
 public:
  NullCommunicator(int rank, int size) : rank_(rank), size_(size), stats_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "none"; }
  Work post(Collective op) override {
    validate(op, rank_, size_);
    return Work();
  }
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }

 private:
  int rank_, size_;
  CommStats stats_;
};

}  // namespace zrt::comm
