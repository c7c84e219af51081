// StagedCommunicator: hands a backend only the memory it can take, copying the rest through
// staging buffers of the other kind on one of the device's streams.
//   A host backend (MPI, threads): every operation's input is copied into pinned host memory,
//   the host collective runs there and the result is copied back. With the cuda device this is
//   how several ranks sharing one GPU communicate without NCCL; with the strict host device it
//   runs anywhere.
//   A backend that takes device memory only (NCCL): device buffers go to it as they are; a
//   buffer in host memory (an offloaded shard, an NVMe read's pinned staging, a small host
//   value) is copied into device memory first, and a result bound for one is copied back, as
//   DeepSpeed moves an offloaded shard to the GPU before its all-gather.
// Operations run in posting order on the communicator's own progress thread; staging memory is
// charged to the device's ledger (CommBuckets, pinned host or device) and grows to the largest
// operation.
// Thread-safety: see Communicator. The backend must outlive this one and should not be used
// directly while staged operations are in flight (its order is shared).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/device.h"

namespace zrt::comm {

class ProgressThread;

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Device& device, Communicator& backend);
  ~StagedCommunicator() override;

  int rank() const override { return backend_.rank(); }
  int size() const override { return backend_.size(); }
  std::string backendName() const override { return "staged(" + backend_.backendName() + ")"; }
  // It takes host and device memory alike; its buffers are the backend's.
  bool takesHostMemory() const override { return true; }
  CommBuffer allocateBuffer(std::size_t bytes) override;
  MemPlace bufferPlace() const override;
  Work post(Collective op) override;
  const CommStats& stats() const override { return stats_; }
  CommStats& stats() override { return stats_; }
  InFlight inFlight() const override;
  // The backend's: its watchdog guards the staged operations.
  void setTimeout(std::chrono::milliseconds timeout) override { backend_.setTimeout(timeout); }
  void setDivergenceTimeout(std::chrono::milliseconds bound) override {
    backend_.setDivergenceTimeout(bound);
  }

 private:
  void runOp(const Collective& op);
  bool needsStaging(const void* p, std::size_t bytes) const;
  char* stage(DeviceMemory& buf, std::size_t bytes);
  void copy(void* dst, const void* src, std::size_t bytes);

  Device& device_;
  Communicator& backend_;
  const bool deviceBackend_;  // the backend takes device memory only
  std::unique_ptr<Stream> stream_;
  DeviceMemory sendStage_, recvStage_;
  CommStats stats_;
  std::unique_ptr<ProgressThread> progress_;  // Last: its thread uses the members above.
};

}  // namespace zrt::comm
