#include "comm/staged_communicator.h"

#include "comm/progress_thread.h"
#include "runtime/error.h"

namespace zrt::comm {

StagedCommunicator::StagedCommunicator(Device& device, Communicator& host)
    : device_(device), host_(host), stream_(device.createStream()), stats_(host.size()) {
  progress_ = std::make_unique<ProgressThread>(
      "zrt-staged", [this](const Collective& op, std::uint64_t) { runOp(op); }, stats_);
}

StagedCommunicator::~StagedCommunicator() { progress_.reset(); }

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
  const std::size_t es = dtypeSize(op.dtype);
  const int me = rank();
  Collective h = op;  // the same operation on the staging buffers
  switch (op.kind) {
    case OpKind::Barrier: host_.post(h).wait(); return;
    case OpKind::AllReduce:
    case OpKind::Broadcast: {
      const std::size_t bytes = op.count * es;
      char* s = stage(sendStage_, bytes);
      if (op.kind == OpKind::AllReduce || me == op.root) copy(s, op.send, bytes);
      stream_->synchronize();  // input staged
      h.send = s;
      h.recv = s;
      host_.post(h).wait();
      copy(op.recv, s, bytes);
      stream_->synchronize();  // result back on the device
      return;
    }
    case OpKind::ReduceScatter: {
      const std::size_t total = totalCount(op) * es, mine = op.counts[static_cast<std::size_t>(me)] * es;
      char* s = stage(sendStage_, total);
      char* r = stage(recvStage_, mine);
      copy(s, op.send, total);
      stream_->synchronize();
      h.send = s;
      h.recv = r;
      host_.post(h).wait();
      copy(op.recv, r, mine);
      stream_->synchronize();
      return;
    }
    case OpKind::AllGather: {
      const std::size_t mine = op.counts[static_cast<std::size_t>(me)] * es;
      const std::size_t extent = recvExtent(op) * es;
      char* s = stage(sendStage_, mine);
      char* r = stage(recvStage_, extent);
      copy(s, op.send, mine);
      stream_->synchronize();
      h.send = s;
      h.recv = r;
      host_.post(h).wait();
      // Segment by segment: the gaps between segments of recv are not ours to overwrite.
      for (int q = 0; q < size(); ++q) {
        const std::size_t off = segmentOffset(op, q) * es;
        copy(static_cast<char*>(op.recv) + off, r + off, op.counts[static_cast<std::size_t>(q)] * es);
      }
      stream_->synchronize();
      return;
    }
  }
}

}  // namespace zrt::comm
