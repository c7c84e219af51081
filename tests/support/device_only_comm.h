// DeviceOnlyComm: NCCL's contract, for tests without a GPU. It takes device memory only: an
// operation naming a buffer that is not inside one allocation of the device throws
// InvalidArgument naming the operation and the buffer, where NCCL would fault or read garbage.
// allocateBuffer hands out device memory (CommBuffer::onDevice), as a device backend does. The
// data moves through a StagedCommunicator over a host backend, the only way MPI reaches the
// strict device's memory; give it a host communicator of its own (a duplicate), as NCCL has its
// own, so its order never mixes with the host one's. Like NCCL, it has no second lane.
// Thread-safety: see Communicator.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "comm/staged_communicator.h"
#include "core/device.h"
#include "core/error.h"

namespace zrt::test {

class DeviceOnlyComm final : public comm::Communicator {
 public:
  DeviceOnlyComm(Device& device, comm::Communicator& host) : device_(device), staged_(device, host) {}

  int rank() const override { return staged_.rank(); }
  int size() const override { return staged_.size(); }
  std::string backendName() const override { return "device-only"; }
  bool takesHostMemory() const override { return false; }
  comm::CommBuffer allocateBuffer(std::size_t bytes) override {
    return comm::CommBuffer::onDevice(device_, bytes);
  }
  comm::Work post(comm::Collective op) override {
    comm::validate(op, rank(), size());
    const comm::BufferBytes b = comm::bufferBytes(op, rank());
    check(op, "send", op.send, b.send);
    check(op, "recv", op.recv, b.recv);
    ++operations_;
    return staged_.post(std::move(op));
  }
  const comm::CommStats& stats() const override { return staged_.stats(); }
  comm::CommStats& stats() override { return staged_.stats(); }
  void setTimeout(std::chrono::milliseconds timeout) override { staged_.setTimeout(timeout); }

  // Operations it carried.
  std::uint64_t operations() const { return operations_.load(); }

 private:
  void check(const comm::Collective& op, const char* which, const void* p, std::size_t bytes) const {
    if (bytes > 0 && !device_.isDeviceMemory(p, bytes))
      ZRT_THROW(InvalidArgument, "device-only backend: ", comm::nameOf(op.kind), "'s ", which, " buffer (",
                bytes, " bytes at ", p, ") is not ", device_.name(), " memory");
  }

  Device& device_;
  comm::StagedCommunicator staged_;
  std::atomic<std::uint64_t> operations_{0};
};

}  // namespace zrt::test
