// The logical block size O_DIRECT needs for files under a directory: buffer addresses, file
// offsets and lengths must all be multiples of it. Thread-safe: reads statx and /sys only.
#pragma once

#include <cstddef>
#include <filesystem>

namespace zrt::offload {

// Asks the kernel (statx's direct-I/O alignment where the file system reports it, else the
// block device's logical sector size); 4096 when nothing answers. Never less than 512.
std::size_t logicalBlockSize(const std::filesystem::path& dir);

}  // namespace zrt::offload
