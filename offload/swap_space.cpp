#include "offload/swap_space.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "offload/cleanup_registry.h"
#include "offload/io_error.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt::offload {

// Moves empty the source explicitly: a moved-from SwapFile must have no paths left to unlink
// (a moved-from vector is only "valid but unspecified").
SwapFile::SwapFile(SwapFile&& other) noexcept
    : name_(std::exchange(other.name_, {})),
      file_(std::move(other.file_)),
      paths_(std::exchange(other.paths_, {})),
      bytes_(std::exchange(other.bytes_, 0)),
      charge_(std::move(other.charge_)) {}

SwapFile& SwapFile::operator=(SwapFile&& other) noexcept {
  if (this != &other) {
    remove();
    name_ = std::exchange(other.name_, {});
    file_ = std::move(other.file_);
    paths_ = std::exchange(other.paths_, {});
    bytes_ = std::exchange(other.bytes_, 0);
    charge_ = std::move(other.charge_);
  }
  return *this;
}

SwapFile::~SwapFile() { remove(); }

void SwapFile::remove() {
  for (const auto& p : paths_) {
    if (::unlink(p.c_str()) != 0 && errno != ENOENT)
      ZRT_WARN("cannot remove swap file '", p.string(), "': ", std::strerror(errno));
  }
  paths_.clear();
  file_.reset();  // in-flight requests keep their own reference until they finish
  charge_.reset();
}

namespace {

std::string safeForFileName(std::string id) {
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return id.substr(0, 64);
}

}  // namespace

std::string SwapSpace::jobIdFromEnvironment() {
  std::string id;
  for (const char* var :
       {"ZRT_JOB_ID", "SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"}) {
    if (const char* v = std::getenv(var); v && *v) {
      id = v;
      break;
    }
  }
  if (id.empty()) id = "pid" + std::to_string(::getpid());
  return safeForFileName(id);
}

SwapSpace::SwapSpace(const std::vector<std::filesystem::path>& nvmePaths, MemoryLedger& ledger,
                     int rank, std::string jobId)
    : ledger_(&ledger) {
  if (nvmePaths.empty()) ZRT_THROW(InvalidArgument, "swap space: nvme_path is empty");
  jobId = safeForFileName(jobId.empty() ? jobIdFromEnvironment() : jobId);
  try {
    for (const auto& base : nvmePaths) {
      std::error_code ec;
      if (!std::filesystem::is_directory(base, ec)) {
        ZRT_THROW(InvalidArgument, "nvme_path '", base.string(),
                  "' does not exist or is not a directory");
      }
      // The owner tag lets the job's other ranks on this host remove this directory if this
      // process is SIGKILLed (cleanup_registry.h).
      const std::string prefix = "zrt-swap-" + jobId + "-rank";
      std::string tmpl =
          (base / (prefix + std::to_string(rank) + "-" + ownerTag() + "-XXXXXX")).string();
      // mkdtemp creates the directory with mode 0700 and a unique name.
      if (::mkdtemp(tmpl.data()) == nullptr) {
        const int err = errno;
        ZRT_THROW_ERRNO(err, "cannot create a swap directory under nvme_path '", base.string(),
                        "': ", std::strerror(err));
      }
      dirs_.emplace_back(tmpl);
      cleanupSlots_.push_back(registerCleanupDirectory(dirs_.back(), prefix));
    }
  } catch (...) {
    for (std::size_t i = 0; i < dirs_.size(); ++i) {
      if (i < cleanupSlots_.size()) unregisterCleanupDirectory(cleanupSlots_[i]);
      removeDirectoryFlat(dirs_[i].c_str());
    }
    throw;
  }
}

SwapSpace::~SwapSpace() {
  for (std::size_t i = 0; i < dirs_.size(); ++i) {
    if (const int err = removeDirectoryFlat(dirs_[i].c_str()); err != 0)
      ZRT_WARN("cannot remove swap directory '", dirs_[i].string(), "': ", std::strerror(err));
    unregisterCleanupDirectory(cleanupSlots_[i]);
  }
}

SwapFile SwapSpace::create(std::string_view name, std::uint64_t bytes, MemTag tag,
                           FileOpenOptions options) {
  if (name.empty() || name.size() > 200 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string_view::npos ||
      name == "." || name == "..") {
    ZRT_THROW(InvalidArgument, "bad swap file name '", name,
              "': use letters, digits, '.', '_' and '-'");
  }
  SwapFile f;
  f.name_ = name;
  f.bytes_ = bytes;
  for (const auto& d : dirs_) f.paths_.push_back(d / std::string(name));
  options.create = true;
  options.exclusive = true;
  options.truncate = false;
  options.readOnly = false;
  options.mode = 0600;
  // From here on f's destructor unlinks what was created if a step throws, except when the
  // name is taken: those files belong to another SwapFile.
  try {
    f.file_ = OffloadFile::open(f.paths_, options);
  } catch (const IoError& e) {
    if (e.errnum() != EEXIST) throw;
    f.paths_.clear();
    ZRT_THROW(InvalidArgument, "swap file '", name, "' already exists in ", dirs_.front().string());
  }
  const std::uint64_t reserved = f.file_->preallocate(bytes);
  f.charge_ = LedgerCharge(*ledger_, tag, MemPlace::Nvme, reserved);
  return f;
}

}  // namespace zrt::offload
