// Helpers shared by the offload tests, in liburing's manner: a private temporary directory,
// a size-limited file system mounted inside one (for real ENOSPC and a file system without
// O_DIRECT), random byte patterns, and skipping a whole program with exit code 77.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>

namespace zrt::offload::test {

// Ends the test program as skipped (ctest's SKIP_RETURN_CODE 77), saying why.
[[noreturn]] inline void skipProgram(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "zrt-offload-test") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "mkdtemp(%s) failed: %s\n", tmpl.c_str(), std::strerror(errno));
      std::abort();
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A file system of type `fstype` (tmpfs, ramfs) mounted on a private temporary directory and
// unmounted on destruction. tryMount answers nullptr (with the reason) where mounting is not
// permitted (not root, no CAP_SYS_ADMIN, a locked-down container).
class ScratchMount {
 public:
  static std::unique_ptr<ScratchMount> tryMount(const std::string& fstype,
                                                const std::string& options, std::string* why) {
    auto m = std::unique_ptr<ScratchMount>(new ScratchMount());
    if (::mount(fstype.c_str(), m->dir_.path().c_str(), fstype.c_str(), 0,
                options.empty() ? nullptr : options.c_str()) != 0) {
      *why = "cannot mount a " + fstype + " (" + options + ") here: " + std::strerror(errno) +
             " (needs root or CAP_SYS_ADMIN)";
      return nullptr;
    }
    m->mounted_ = true;
    return m;
  }
  ~ScratchMount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  ScratchMount() = default;
  TempDir dir_{"zrt-offload-mnt"};
  bool mounted_ = false;
};

// Sends this process's stderr to a temporary file while it lives; text() returns what was
// written so far (warnings the code under test printed).
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    file_ = std::tmpfile();
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::fclose(file_);
  }
  std::string text() const {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    const long n = ::pread(::fileno(file_), buf, sizeof(buf), 0);
    if (n > 0) out.assign(buf, static_cast<std::size_t>(n));
    return out;
  }

 private:
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

// Deterministic pseudo-random bytes: the same (seed, n) always gives the same bytes.
inline void fillPattern(void* buf, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  const std::uint64_t v = rng();
  std::memcpy(p + i, &v, n - i);
}

// The offset of the first byte that differs from the pattern, or -1 when all match.
inline long long firstMismatch(const void* buf, std::size_t n, std::uint64_t seed) {
  std::unique_ptr<unsigned char[]> want(new unsigned char[n + 8]);
  fillPattern(want.get(), n, seed);
  const auto* p = static_cast<const unsigned char*>(buf);
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != want[i]) return static_cast<long long>(i);
  }
  return -1;
}

}  // namespace zrt::offload::test
