#include "comm/staged_communicator.h"

#include "comm/progress_thread.h"
#include "core/error.h"

namespace zrt::comm {

StagedCommunicator::StagedCommunicator(Device& device, Communicator& host)
    : device_(device), host_(host), stream_(device.createStream()), stats_(host.size()) {
  progress_ = std::make_unique<ProgressThread>(
      "zrt-staged", [this](const Collective& op, std::uint64_t) { runOp(op); }, stats_);
}

StagedCommunicator::~StagedCommunicator() { progress_.reset(); }

InFlight StagedCommunicator::inFlight() const { return progress_->inFlight(); }

Work StagedCommunicator::post(Collective op) {
  validate(op, rank(), size());
  return progress_->enqueue(std::move(op), "staged");
}

char* StagedCommunicator::stage(DeviceMemory& buf, std::size_t bytes) {
  if (buf.bytes() < bytes) {
    buf.reset();
    buf = device_.allocatePinned(bytes, MemTag::CommBuckets);
  }
  return buf.as<char>();
}

void StagedCommunicator::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  device_.copyAsync(dst, src, bytes, *stream_);
}

void StagedCommunicator::runOp(const Collective& op) {
  if (op.kind == OpKind::Barrier) return host_.post(op).wait();
  const std::size_t es = dtypeSize(op.dtype);
  const auto me = static_cast<std::size_t>(rank());
  // Bytes this rank hands to the host collective, and bytes of the result it copies back; the
  // all-reduce and broadcast run in place in the send staging.
  std::size_t inBytes = 0, outBytes = 0;
  bool inPlace = false;
  switch (op.kind) {
    case OpKind::AllReduce: inBytes = outBytes = op.count * es; inPlace = true; break;
    case OpKind::Broadcast:
      inBytes = rank() == op.root ? op.count * es : 0;
      outBytes = op.count * es;
      inPlace = true;
      break;
    case OpKind::ReduceScatter: inBytes = totalCount(op) * es; outBytes = op.counts[me] * es; break;
    case OpKind::AllGather: inBytes = op.counts[me] * es; outBytes = recvExtent(op) * es; break;
    case OpKind::Barrier: break;
  }
  char* s = stage(sendStage_, inPlace ? outBytes : inBytes);
  char* r = inPlace ? s : stage(recvStage_, outBytes);
  copy(s, op.send, inBytes);
  stream_->synchronize();  // input staged
  Collective h = op;  // the same operation on the staging buffers
  h.send = s;
  h.recv = r;
  host_.post(h).wait();
  if (op.kind == OpKind::AllGather) {
    // Segment by segment: the gaps between segments of recv are not ours to overwrite.
    for (int q = 0; q < size(); ++q) {
      const std::size_t off = segmentOffset(op, q) * es;
      copy(static_cast<char*>(op.recv) + off, r + off, op.counts[static_cast<std::size_t>(q)] * es);
    }
  } else {
    copy(op.recv, r, outBytes);
  }
  stream_->synchronize();  // result back on the device
}

}  // namespace zrt::comm
