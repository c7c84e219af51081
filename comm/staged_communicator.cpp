#include "comm/staged_communicator.h"

#include "comm/progress_thread.h"
#include "core/error.h"

namespace zrt::comm {

StagedCommunicator::StagedCommunicator(Device& device, Communicator& backend)
    : device_(device),
      backend_(backend),
      deviceBackend_(!backend.takesHostMemory()),
      stream_(device.createStream()),
      stats_(backend.size()) {
  progress_ = std::make_unique<ProgressThread>(
      "zrt-staged", [this](const Collective& op, std::uint64_t) { runOp(op); }, stats_);
}

StagedCommunicator::~StagedCommunicator() { progress_.reset(); }

InFlight StagedCommunicator::inFlight() const { return progress_->inFlight(); }

CommBuffer StagedCommunicator::allocateBuffer(std::size_t bytes) {
  return deviceBackend_ ? backend_.allocateBuffer(bytes) : Communicator::allocateBuffer(bytes);
}

MemPlace StagedCommunicator::bufferPlace() const {
  return deviceBackend_ ? backend_.bufferPlace() : MemPlace::Host;
}

Work StagedCommunicator::post(Collective op) {
  validate(op, rank(), size());
  return progress_->enqueue(std::move(op), "staged");
}

// A host backend gets nothing of the device's (the host may not be able to read any of it), so
// everything is staged; a device backend gets the device's own memory as it is.
bool StagedCommunicator::needsStaging(const void* p, std::size_t bytes) const {
  if (bytes == 0) return false;
  return !deviceBackend_ || !device_.isDeviceMemory(p, bytes);
}

char* StagedCommunicator::stage(DeviceMemory& buf, std::size_t bytes) {
  if (buf.bytes() < bytes) {
    buf.reset();
    buf = deviceBackend_ ? device_.allocate(bytes, MemTag::CommBuckets)
                         : device_.allocatePinned(bytes, MemTag::CommBuckets);
  }
  return buf.as<char>();
}

void StagedCommunicator::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  device_.copyAsync(dst, src, bytes, *stream_);
}

void StagedCommunicator::runOp(const Collective& op) {
  if (op.kind == OpKind::Barrier) return backend_.post(op).wait();
  const std::size_t es = dtypeSize(op.dtype);
  const auto [inBytes, outBytes] = bufferBytes(op, rank());
  Collective h = op;  // the same operation, on staging where the backend needs it
  const bool stageOut = needsStaging(op.recv, outBytes);
  if (stageOut) h.recv = stage(recvStage_, outBytes);
  if (op.kind == OpKind::Broadcast) {
    h.send = h.recv;
    if (stageOut && rank() == op.root) copy(h.recv, op.recv, outBytes);
  } else if (needsStaging(op.send, inBytes)) {
    // A staged all-reduce runs in place in its receive staging.
    char* s = op.kind == OpKind::AllReduce && stageOut ? static_cast<char*>(h.recv) : stage(sendStage_, inBytes);
    copy(s, op.send, inBytes);
    h.send = s;
  }
  stream_->synchronize();  // input staged
  backend_.post(h).wait();
  if (!stageOut) return;
  if (op.kind == OpKind::AllGather) {
    // Segment by segment: the gaps between segments of recv are not ours to overwrite.
    for (int q = 0; q < size(); ++q) {
      const std::size_t off = segmentOffset(op, q) * es;
      copy(static_cast<char*>(op.recv) + off, static_cast<char*>(h.recv) + off,
           op.counts[static_cast<std::size_t>(q)] * es);
    }
  } else {
    copy(op.recv, h.recv, outBytes);
  }
  stream_->synchronize();  // result back where the caller wants it
}

}  // namespace zrt::comm
