// Swap space on NVMe: SwapSpace owns one private directory per nvme_path for this job and rank
// ("<nvme_path>/zrt-swap-<job>-rank<R>-<owner>-XXXXXX", mode 0700, made by mkdtemp so two jobs
// never share one; <owner> is the cleanup registry's ownerTag(): pid, PID namespace, host),
// registered with the cleanup registry so SIGINT/SIGTERM, an abort and exit() remove it, and
// so the job's other ranks on this host remove it if this process is SIGKILLed.
// SwapFile is one swap file striped over those directories (mode 0600), its space reserved up
// front with fallocate and charged to the ledger at MemPlace::Nvme; it is unlinked when the
// SwapFile goes away.
// Thread-safety: SwapSpace::create from any thread; a SwapFile is a move-only owner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "offload/offload_file.h"
#include "core/memory_ledger.h"

namespace zrt::offload {

class SwapFile {
 public:
  SwapFile() = default;
  ~SwapFile();
  SwapFile(SwapFile&& other) noexcept;
  SwapFile& operator=(SwapFile&& other) noexcept;
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::shared_ptr<OffloadFile>& file() const { return file_; }
  const std::string& name() const { return name_; }
  std::uint64_t bytes() const { return bytes_; }        // the logical size asked for
  std::uint64_t reserved() const { return charge_.bytes(); }  // disk bytes over all stripes
  // Unlinks the stripes now (also done by the destructor).
  void remove();

 private:
  friend class SwapSpace;
  std::string name_;
  std::shared_ptr<OffloadFile> file_;
  std::vector<std::filesystem::path> paths_;
  std::uint64_t bytes_ = 0;
  LedgerCharge charge_;
};

class SwapSpace {
 public:
  // Throws InvalidArgument when an nvme_path is missing or not a directory, IoError when the
  // private directory cannot be made.
  SwapSpace(const std::vector<std::filesystem::path>& nvmePaths, MemoryLedger& ledger, int rank,
            std::string jobId = jobIdFromEnvironment());
  // Removes the directories and whatever is left in them.
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  const std::vector<std::filesystem::path>& directories() const { return dirs_; }

  // `name`: letters, digits, '.', '_', '-'. `options` say O_DIRECT or not and the stripe unit;
  // create/exclusive/mode are set here. Throws IoError (ENOSPC with the free space) when the
  // space cannot be reserved, leaving no file behind.
  SwapFile create(std::string_view name, std::uint64_t bytes, MemTag tag,
                  FileOpenOptions options);

  // ZRT_JOB_ID, SLURM_JOB_ID, Open MPI's job id or PMIX_NAMESPACE, else "pid<PID>"; reduced to
  // characters safe in a file name.
  static std::string jobIdFromEnvironment();

 private:
  MemoryLedger* ledger_;
  std::vector<std::filesystem::path> dirs_;
  std::vector<int> cleanupSlots_;
};

}  // namespace zrt::offload
