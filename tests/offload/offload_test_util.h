// Helpers shared by the offload tests, in liburing's manner: a private temporary directory,
// a size-limited file system mounted inside one (for real ENOSPC and a file system without
// O_DIRECT), random byte patterns, a write-and-read-back round trip through an engine, and
// skipping a whole program with exit code 77.
// Each program includes this header once (one source file per program): it registers the
// doctest listener that skipProgram consults.
#pragma once

#include <doctest/doctest.h>

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

#include "offload/aligned_buffer.h"
#include "offload/offload_engine.h"

namespace zrt::offload::test {

// Counts the test cases this program has started and the assertions that failed, so that
// skipProgram can tell whether anything ran before it.
class RunSoFar : public doctest::IReporter {
 public:
  explicit RunSoFar(const doctest::ContextOptions&) {}
  static inline int casesStarted = 0;
  static inline int failedAssertions = 0;
  void test_case_start(const doctest::TestCaseData&) override { ++casesStarted; }
  void log_assert(const doctest::AssertData& a) override {
    if (a.m_failed) ++failedAssertions;
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("zrt_offload_run_so_far", 1, RunSoFar);

// Ends the test program as skipped (ctest's SKIP_RETURN_CODE 77), saying why. A program decides
// whether it can run before it runs anything: ctest reports a skipped program as "Skipped"
// whatever its earlier cases found, so a skip after another case started, or after a failed
// assertion, would hide a result. That is a mistake in the test, and it fails here instead.
[[noreturn]] inline void skipProgram(const std::string& why) {
  if (RunSoFar::casesStarted > 1 || RunSoFar::failedAssertions > 0) {
    std::printf("error: this program cannot run here (%s), but it found that out after %d test "
                "case(s) started and %d assertion(s) failed; a skip now would report them as "
                "\"Skipped\". Decide whether the program can run in its first case, before any "
                "check, or move the checks that can always run into another program.\n",
                why.c_str(), RunSoFar::casesStarted, RunSoFar::failedAssertions);
    std::fflush(stdout);
    std::_Exit(1);
  }
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

// An ext4 file system on a loop device with `sectorSize`-byte logical blocks, mounted on a
// private temporary directory; detached on destruction. tryMount answers nullptr (with the
// reason) where loop devices, mkfs.ext4 or mounting are not available. It lets a test see a
// 4 KiB-sector drive on a machine whose disks have 512-byte sectors.
class LoopMount {
 public:
  static std::unique_ptr<LoopMount> tryMount(unsigned sectorSize, std::size_t imageBytes,
                                             std::string* why) {
    auto m = std::unique_ptr<LoopMount>(new LoopMount());
    const std::string image = (m->images_.path() / "image").string();
    const std::string out = (m->images_.path() / "device").string();
    const std::string cmd = "truncate -s " + std::to_string(imageBytes) + " " + image +
                            " && losetup --sector-size " + std::to_string(sectorSize) +
                            " -f --show " + image + " > " + out + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      *why = "cannot attach a loop device with " + std::to_string(sectorSize) +
             "-byte sectors here (needs root and losetup)";
      return nullptr;
    }
    if (std::FILE* f = std::fopen(out.c_str(), "r")) {
      char dev[256] = {};
      if (std::fgets(dev, sizeof dev, f)) m->device_ = dev;
      std::fclose(f);
    }
    while (!m->device_.empty() && m->device_.back() == '\n') m->device_.pop_back();
    if (m->device_.empty()) {
      *why = "losetup printed no device";
      return nullptr;
    }
    const std::string mkfs = "mkfs.ext4 -q -F " + m->device_ + " >/dev/null 2>&1";
    if (std::system(mkfs.c_str()) != 0 ||
        ::mount(m->device_.c_str(), m->mountDir_.path().c_str(), "ext4", 0, nullptr) != 0) {
      *why = "cannot make or mount an ext4 file system on " + m->device_ +
             " (needs mkfs.ext4 and CAP_SYS_ADMIN)";
      return nullptr;
    }
    m->mounted_ = true;
    return m;
  }
  ~LoopMount() {
    if (mounted_) ::umount2(mountDir_.path().c_str(), MNT_DETACH);
    if (!device_.empty()) {
      const std::string cmd = "losetup -d " + device_ + " 2>/dev/null";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not detach %s\n", device_.c_str());
    }
  }
  LoopMount(const LoopMount&) = delete;
  LoopMount& operator=(const LoopMount&) = delete;
  const std::filesystem::path& path() const { return mountDir_.path(); }

 private:
  LoopMount() = default;
  TempDir images_{"zrt-offload-loopimg"};
  TempDir mountDir_{"zrt-offload-loopmnt"};
  std::string device_;
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

// Writes 3'000'017 bytes (a tail past the last block) through `engine` into a new file in a
// temporary directory and reads them back; every byte must match. The smoke test of a fallback.
inline void roundTrip(OffloadEngine& engine) {
  TempDir dir;
  auto opts = engine.fileOptions();
  opts.create = true;
  auto file = engine.open({dir.path() / "f"}, opts);
  AlignedBuffer a(3 << 20), b(3 << 20);
  fillPattern(a.data(), 3'000'017, 21);
  engine.writeSync(file, 0, a.data(), 3'000'017);
  engine.readSync(file, 0, b.data(), 3'000'017);
  CHECK(firstMismatch(b.data(), 3'000'017, 21) == -1);
}

}  // namespace zrt::offload::test
