#include "offload/block_size.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <string>

namespace zrt::offload {

std::size_t logicalBlockSize(const std::filesystem::path& dir) {
  constexpr std::size_t kUnknown = 4096;
  struct statx stx {};
#ifdef STATX_DIOALIGN
  // Linux 6.1+: the file system states its own O_DIRECT alignment.
  if (statx(AT_FDCWD, dir.c_str(), 0, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0) {
    return std::max<std::size_t>(512, std::max(stx.stx_dio_offset_align, stx.stx_dio_mem_align));
  }
#endif
  if (statx(AT_FDCWD, dir.c_str(), 0, STATX_BASIC_STATS, &stx) != 0) return kUnknown;
  // The block device behind the file system: /sys/dev/block/MAJ:MIN/queue/logical_block_size,
  // or the parent device's queue for a partition.
  const std::string base = "/sys/dev/block/" + std::to_string(stx.stx_dev_major) + ":" +
                           std::to_string(stx.stx_dev_minor);
  for (const char* rel : {"/queue/logical_block_size", "/../queue/logical_block_size"}) {
    std::ifstream in(base + rel);
    std::size_t n = 0;
    if (in >> n && n >= 512) return n;
  }
  return kUnknown;
}

}  // namespace zrt::offload
