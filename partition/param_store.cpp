#include "partition/param_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "offload/aligned_buffer.h"

namespace zrt {

ParamShardStore::ParamShardStore(offload::OffloadEngine& io, const StateBuffer& inCpu,
                                 const StateBuffer& onNvme, DType dtype)
    : io_(io),
      cpu_(static_cast<char*>(inCpu.data())),
      file_(onNvme.swapFile()),
      es_(dtypeSize(dtype)) {
  ZRT_ENFORCE(!onNvme || file_, "parameter store: the NVMe part has no swap file");
  inCpu_ = inCpu.bytes() / es_;
  onNvme_ = onNvme.bytes() / es_;
  alignment_ = file_ ? std::max<std::size_t>(1, file_->file()->alignment()) : 1;
  // placement.h puts a split on a 4 KiB boundary: the file's element 0 is shard element inCpu_.
  ZRT_ENFORCE(onNvme_ == 0 || inCpu_ == 0 || (inCpu_ * es_) % 4096 == 0,
              "parameter store: the split at element ", inCpu_, " is not 4 KiB-aligned");
}

ParamShardStore::ParamShardStore(offload::OffloadEngine& io, const StateBuffer& inCpu, const offload::SwapFile& file,
                                 std::uint64_t onNvme, DType dtype)
    : io_(io), cpu_(static_cast<char*>(inCpu.data())), file_(&file), es_(dtypeSize(dtype)) {
  inMaster_ = true;
  inCpu_ = inCpu.bytes() / es_;
  onNvme_ = onNvme;
  fileOffset_ = inCpu_ * es_;
  alignment_ = std::max<std::size_t>(1, file_->file()->alignment());
  ZRT_ENFORCE(fileOffset_ % 4096 == 0, "parameter store: the split at element ", inCpu_, " is not 4 KiB-aligned");
  ZRT_ENFORCE(file_->bytes() >= fileOffset_ + onNvme_ * es_, "parameter store: the master weights' file (",
              file_->bytes(), " bytes) is smaller than the shard");
}

std::size_t ParamShardStore::stagingBytes(std::uint64_t count) const {
  return static_cast<std::size_t>(count * es_ + 2 * alignment_);
}

ParamShardStore::Staged ParamShardStore::read(std::uint64_t begin, std::uint64_t count, char* staging) {
  ZRT_ENFORCE(begin + count <= this->count(), "parameter store: elements [", begin, ", ", begin + count,
              ") are outside the shard of ", this->count());
  Staged s;
  const std::uint64_t end = begin + count;
  const std::uint64_t memEnd = std::min(end, inCpu_);
  const std::uint64_t fileBegin = std::max(begin, inCpu_);
  if (fileBegin >= end) {  // all in memory: the gather reads it where it is
    s.data = cpu_ + begin * es_;
    return s;
  }
  // The file's part starts at an aligned offset and an aligned place of the buffer, far enough in
  // for the memory part to sit right before it.
  const std::uint64_t at = fileOffset_ + (fileBegin - inCpu_) * es_;
  const std::uint64_t alignedAt = at - at % alignment_;
  const std::uint64_t memBytes = begin < memEnd ? (memEnd - begin) * es_ : 0;
  const std::uint64_t slot = (memBytes + alignment_ - 1) / alignment_ * alignment_;
  char* fileData = staging + slot + (at - alignedAt);
  s.data = fileData - memBytes;
  if (memBytes) std::memcpy(const_cast<char*>(s.data), cpu_ + begin * es_, memBytes);
  s.reads.push_back(io_.read(file_->file(), alignedAt, staging + slot, (end - fileBegin) * es_ + (at - alignedAt)));
  return s;
}

void ParamShardStore::transferAll(char* mem, bool write) {
  if (inCpu_) {
    if (write) std::memcpy(cpu_, mem, inCpu_ * es_);
    else std::memcpy(mem, cpu_, inCpu_ * es_);
  }
  if (!onNvme_) return;
  char* part = mem + inCpu_ * es_;
  const std::size_t bytes = onNvme_ * es_;
  if (reinterpret_cast<std::uintptr_t>(part) % alignment_ == 0) {
    if (write) io_.writeSync(file_->file(), fileOffset_, part, bytes);
    else io_.readSync(file_->file(), fileOffset_, part, bytes);
    return;
  }
  // A buffer the file cannot take directly goes through an aligned bounce buffer.
  constexpr std::size_t kChunk = 8 << 20;
  offload::AlignedBuffer bounce(kChunk, std::max<std::size_t>(alignment_, 4096));
  for (std::size_t done = 0; done < bytes; done += kChunk) {
    const std::size_t n = std::min(kChunk, bytes - done);
    if (write) {
      std::memcpy(bounce.data(), part + done, n);
      io_.writeSync(file_->file(), fileOffset_ + done, bounce.data(), n);
    } else {
      io_.readSync(file_->file(), fileOffset_ + done, bounce.data(), n);
      std::memcpy(part + done, bounce.data(), n);
    }
  }
}

void ParamShardStore::writeAfterStep(const char* mem) {
  if (!inMaster_) {
    writeAll(mem);
    return;
  }
  if (inCpu_) std::memcpy(cpu_, mem, inCpu_ * es_);
}

void ParamShardStore::readAll(char* mem) { transferAll(mem, /*write=*/false); }
void ParamShardStore::writeAll(const char* mem) { transferAll(const_cast<char*>(mem), /*write=*/true); }

}  // namespace zrt
