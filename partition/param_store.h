// One stage-3 parameter shard under offload_param = nvme, as the coordinator and the engine
// reach it: its first elements in host memory (offload_param.max_in_cpu), the rest in a swap
// file. read() stages a range for a gather: the part in memory is copied at once, the part on
// NVMe is read by the offload engine into the caller's pinned buffer, and the caller waits on
// the returned handles before the bytes are used. readAll()/writeAll() move the whole shard:
// at initialisation, after every optimizer step (writeAfterStep: the updated shard goes back to
// NVMe), and for checkpoints.
// Thread-safety: one thread drives a store; the offload engine's threads do the I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "offload/io_request.h"
#include "offload/offload_engine.h"
#include "partition/model_states.h"

namespace zrt {

class ParamShardStore {
 public:
  // `inCpu`: the shard's first elements (may be empty); `onNvme`: a swap file with the rest.
  // Both must outlive the store, as must `io`.
  ParamShardStore(offload::OffloadEngine& io, const StateBuffer& inCpu, const StateBuffer& onNvme,
                  DType dtype);
  // The NVMe part is `onNvme` elements of `file` after its first inCpu's: the fp32 master
  // weights' swap file, which holds the whole shard (placement.h, parametersInMaster).
  ParamShardStore(offload::OffloadEngine& io, const StateBuffer& inCpu, const offload::SwapFile& file,
                  std::uint64_t onNvme, DType dtype);

  std::uint64_t count() const { return inCpu_ + onNvme_; }
  std::uint64_t inCpu() const { return inCpu_; }
  // Bytes of staging that read() needs for `count` elements (direct reads start at an aligned
  // file offset, so the range may sit up to two alignments into the buffer).
  std::size_t stagingBytes(std::uint64_t count) const;

  struct Staged {
    const char* data = nullptr;  // the elements, once `reads` are done
    std::vector<offload::IoHandle> reads;
  };
  // Starts staging elements [begin, begin + count) in `staging` (stagingBytes(count) bytes,
  // aligned to kPinnedBufferAlignment).
  Staged read(std::uint64_t begin, std::uint64_t count, char* staging);

  // The whole shard from or to `mem` (count() elements); they wait for the I/O and rethrow its
  // error, which names the file and offset.
  void readAll(char* mem);
  void writeAll(const char* mem);
  // The updated shard after an optimizer step: writeAll(), except where the NVMe part is the
  // master weights' file (the second constructor), which the optimizer's write-back has
  // already updated: then the host part alone. (Initialisation and checkpoint loads writeAll():
  // the parameters' values then win over the master's, which in fp32 are the same bits.)
  void writeAfterStep(const char* mem);

 private:
  void transferAll(char* mem, bool write);

  offload::OffloadEngine& io_;
  char* cpu_;
  const offload::SwapFile* file_;
  std::uint64_t inCpu_, onNvme_;
  std::uint64_t fileOffset_ = 0;  // bytes: where the NVMe part starts in the file
  bool inMaster_ = false;  // the second constructor
  std::size_t es_;
  std::size_t alignment_;
};

}  // namespace zrt
