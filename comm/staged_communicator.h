// StagedCommunicator: lets a rank whose buffers are in device memory use a host Communicator
// (the MPI backend) through pinned staging buffers: each operation copies its input from the
// device into pinned host memory, runs the host collective there, and copies the result back.
// With the cuda device this is how several ranks sharing one GPU communicate without NCCL; with
// the simulated host device it runs anywhere. Operations run in posting order on the
// communicator's own progress thread; staging memory is charged to the device's ledger
// (CommBuckets, pinned host) and grows to the largest operation.
// Thread-safety: see Communicator. The host communicator must outlive this one and should not
// be used directly while staged operations are in flight (its order is shared).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/device.h"

namespace zrt::comm {

class ProgressThread;

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Device& device, Communicator& host);
  ~StagedCommunicator() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string backendName() const override { return "staged(" + host_.backendName() + ")"; }
  Work post(Collective op) override;
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }
  InFlight inFlight() const override;
  // The host communicator's: its watchdog guards the staged operations.
  void setTimeout(std::chrono::milliseconds timeout) override { host_.setTimeout(timeout); }

 private:
  void runOp(const Collective& op);
  char* stage(DeviceMemory& buf, std::size_t bytes);
  void copy(void* dst, const void* src, std::size_t bytes);

  Device& device_;
  Communicator& host_;
  std::unique_ptr<Stream> stream_;
  DeviceMemory sendStage_, recvStage_;
  CommStats stats_;
  std::unique_ptr<ProgressThread> progress_;  // Last: its thread uses the members above.
};

}  // namespace zrt::comm
