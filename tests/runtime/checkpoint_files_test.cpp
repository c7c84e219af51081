// The checkpoint files as a hostile directory can present them. Something other than a regular
// file where a reader expects one (a FIFO, whose plain open waits forever for a writer) is
// refused at once, naming the path: `latest`, manifest.json, engine_state.json, a shard, a
// safetensors file, through each reader and through Engine::load (zrt-train --resume). Each
// read runs in a child process under a time limit, so a regression fails here instead of
// hanging the suite. A safetensors file whose tensors overlap, leave a hole or are followed by
// bytes is refused as the format's own reader refuses it. A link planted where a checkpoint file
// is created is never followed: the creation fails naming the path and the link's target is
// left as it was. One process, no MPI (a thread world of one).
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "comm/threads/thread_world.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/runtime/checkpoint_test_support_nompi.h"

using namespace zrt;
namespace fs = std::filesystem;

namespace {

constexpr int kChildLimitS = 10;

struct TempDir {
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string t = std::string(base && *base ? base : "/tmp") + "/zrt-ckpt-files-XXXXXX";
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

// Runs `fn` in a child process and returns what it threw ("" when it returned). A child still
// running after kChildLimitS seconds is killed and the answer says it hung: the reads tested
// here must never wait on anything.
std::string inChild(const std::function<void()>& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      fn();
    } catch (const std::exception& e) {
      out = e.what();
      if (out.empty()) out = "(an exception with no message)";
    }
    for (std::size_t at = 0; at < out.size();) {
      const ssize_t w = ::write(fds[1], out.data() + at, out.size() - at);
      if (w <= 0) break;
      at += static_cast<std::size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kChildLimitS);
  bool hung = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    // Waits for the child's answer or its exit (end of file), at most until the deadline.
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (hung) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (hung) return "HUNG: still running after " + std::to_string(kChildLimitS) + " s";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "CRASHED: status " + std::to_string(status);
  return out;
}

void replaceByFifo(const fs::path& p) {
  fs::remove(p);
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
}

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file, byte by byte: u64 little-endian header length, the header, the data.
std::string writeSafetensors(const fs::path& dir, const std::string& header,
                             std::size_t dataBytes) {
  const fs::path path = dir / "t.safetensors";
  fs::remove(path);
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << std::string(dataBytes, '\0');
  return path.string();
}

std::string refusal(const std::string& path) {
  try {
    checkpoint::SafetensorsReader r(path);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE(
    "a FIFO where a checkpoint file should be is refused at once, naming it, by every reader") {
  TempDir dir;
  const std::string root = dir.path.string();
  REQUIRE(inChild([&] {
            comm::ThreadWorld world(1);
            auto comm = world.connect(0);
            test::SoloEngine t(*comm);
            test::train(t.engine, *comm, 1, 2);
            t.engine.save(root, "good");
          }) == "");
  const fs::path good = dir.path / "good";
  auto copy = [&](const std::string& name) {
    fs::create_directory(dir.path / ("copy-" + name));
    fs::copy(good, dir.path / ("copy-" + name) / "ck", fs::copy_options::recursive);
    std::ofstream(dir.path / ("copy-" + name) / "latest") << "ck\n";
    return dir.path / ("copy-" + name);
  };
  // Engine::load, as zrt-train --resume calls it: the error names the FIFO.
  auto resume = [](const fs::path& d) {
    return inChild([&] {
      comm::ThreadWorld world(1);
      auto comm = world.connect(0);
      test::SoloEngine t(*comm);
      t.engine.load(d.string(), "");
    });
  };
  const std::string fifoIs = " is a FIFO, not a regular file";

  SUBCASE("latest") {
    const fs::path d = copy("latest");
    replaceByFifo(d / "latest");
    std::string e = inChild([&] { checkpoint::resolveTag(d.string(), ""); });
    CHECK_MESSAGE(e.find((d / "latest").string() + fifoIs) != std::string::npos, e);
    e = resume(d);
    CHECK_MESSAGE(e.find((d / "latest").string() + fifoIs) != std::string::npos, e);
  }
  SUBCASE("manifest.json") {
    const fs::path d = copy("manifest");
    replaceByFifo(d / "ck" / checkpoint::kManifestName);
    const std::string want = (d / "ck" / checkpoint::kManifestName).string() + fifoIs;
    std::string e = inChild([&] { checkpoint::CheckpointReader r((d / "ck").string()); });
    CHECK_MESSAGE(e.find(want) != std::string::npos, e);
    e = resume(d);
    CHECK_MESSAGE(e.find(want) != std::string::npos, e);
  }
  SUBCASE("engine_state.json, read directly and through a load") {
    const fs::path d = copy("engine");
    replaceByFifo(d / "ck" / checkpoint::kEngineStateName);
    const std::string path = (d / "ck" / checkpoint::kEngineStateName).string();
    std::string e =
        inChild([&] { checkpoint::CheckpointReader((d / "ck").string()).engineState(); });
    CHECK_MESSAGE(e.find(path + fifoIs) != std::string::npos, e);
    e = inChild([&] { checkpoint::digestFile(path); });
    CHECK_MESSAGE(e.find(path + fifoIs) != std::string::npos, e);
    e = resume(d);
    CHECK_MESSAGE(e.find(path) != std::string::npos, e);
    CHECK_MESSAGE(e.find("not a regular file") != std::string::npos, e);
  }
  SUBCASE("a shard file") {
    const fs::path d = copy("shard");
    const checkpoint::Manifest m = checkpoint::readManifest((d / "ck").string());
    std::string shard;
    for (const checkpoint::ManifestFile& f : m.files)
      if (f.state == "params") shard = (d / "ck" / f.path).string();
    REQUIRE(!shard.empty());
    replaceByFifo(shard);
    const checkpoint::CheckpointReader r((d / "ck").string());
    const std::string e = inChild([&] {
      std::vector<float> out(8);
      r.read("params", 0, 8, DType::F32, out.data());
    });
    CHECK_MESSAGE(e.find(shard + fifoIs) != std::string::npos, e);
  }
  SUBCASE("a safetensors file") {
    const std::string path = (dir.path / "w.safetensors").string();
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const std::string e = inChild([&] { checkpoint::SafetensorsReader r(path); });
    CHECK_MESSAGE(e.find(path + fifoIs) != std::string::npos, e);
  }
}

TEST_CASE(
    "safetensors tensors must tile the data: overlaps, holes and trailing bytes are refused") {
  TempDir dir;
  auto header = [](const std::string& entries) { return "{" + entries + "}"; };
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  // Tiled exactly, listed out of offset order, with an empty tensor between: accepted.
  const std::string ok =
      writeSafetensors(dir.path,
                       header(R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                              R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)" +
                              a),
                       12);
  CHECK(checkpoint::SafetensorsReader(ok).tensors().size() == 3);

  const std::string overlap = writeSafetensors(
      dir.path, header(a + R"(,"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]})"), 8);
  std::string e = refusal(overlap);
  CHECK_MESSAGE(e.find(overlap + ": tensors 'a' (data_offsets [0, 8)) and 'b' ([4, 8)) overlap") !=
                    std::string::npos,
                e);

  const std::string same = writeSafetensors(
      dir.path, header(a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), 8);
  e = refusal(same);
  CHECK_MESSAGE(
      e.find("tensors 'a' (data_offsets [0, 8)) and 'b' ([0, 8)) overlap") != std::string::npos, e);

  const std::string trailing = writeSafetensors(dir.path, header(a), 12);
  e = refusal(trailing);
  CHECK_MESSAGE(
      e.find(trailing +
             ": 4 bytes follow the last tensor's data ('a' ends at 8, the file holds 12 data "
             "bytes)") != std::string::npos,
      e);

  const std::string hole = writeSafetensors(
      dir.path, header(a + R"(,"b":{"dtype":"F16","shape":[2],"data_offsets":[12,16]})"), 16);
  e = refusal(hole);
  CHECK_MESSAGE(
      e.find(hole +
             ": data bytes [8, 12) belong to no tensor (between 'a', which ends at 8, and 'b', "
             "which begins at 12)") != std::string::npos,
      e);

  const std::string leading = writeSafetensors(
      dir.path, header(R"("b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]})"), 8);
  e = refusal(leading);
  CHECK_MESSAGE(
      e.find(leading + ": data bytes [0, 4) belong to no tensor (before 'b'") != std::string::npos,
      e);

  const std::string none = writeSafetensors(dir.path, "{}", 4);
  e = refusal(none);
  CHECK_MESSAGE(e.find(none + ": 4 bytes follow the last tensor's data (there are no tensors") !=
                    std::string::npos,
                e);
}

TEST_CASE(
    "a link planted where a checkpoint file is created is not followed; its target is untouched") {
  TempDir dir;
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "precious\n";
  const fs::path link = dir.path / "planted";
  fs::create_symlink(victim, link);

  SUBCASE("File::createExclusive, which every checkpoint file goes through") {
    std::string e;
    try {
      checkpoint::File::createExclusive(link.string());
    } catch (const IoError& x) {
      e = x.what();
    }
    CHECK_MESSAGE(e.find("cannot create " + link.string() + ": File exists") != std::string::npos,
                  e);
  }
  SUBCASE("a safetensors writer") {
    std::string e;
    try {
      checkpoint::SafetensorsWriter w(link.string(), {{"w", DType::F32, {2}, 0, 0}}, {});
    } catch (const IoError& x) {
      e = x.what();
    }
    CHECK_MESSAGE(e.find("cannot create " + link.string() + ": File exists") != std::string::npos,
                  e);
  }
  SUBCASE("a dangling link, whose target a followed link would create") {
    fs::remove(victim);
    CHECK_THROWS_AS(checkpoint::File::createExclusive(link.string()), IoError);
    CHECK_FALSE(fs::exists(fs::symlink_status(victim)));
    std::ofstream(victim) << "precious\n";
  }
  SUBCASE("`latest` a link: replaced by a file of its own, not written through") {
    fs::create_symlink(victim, dir.path / checkpoint::kLatestName);
    checkpoint::replaceFileAtomically(dir.path.string(), checkpoint::kLatestName, "tag\n");
    CHECK(fs::is_regular_file(fs::symlink_status(dir.path / checkpoint::kLatestName)));
    CHECK(readAll(dir.path / checkpoint::kLatestName) == "tag\n");
  }
  SUBCASE("a save into a checkpoint directory that is a link") {
    fs::create_directory(dir.path / "elsewhere");
    fs::create_directory_symlink(dir.path / "elsewhere", dir.path / "ckpts");
    const std::string target = (dir.path / "ckpts").string();
    const std::string e = inChild([&] {
      comm::ThreadWorld world(1);
      auto comm = world.connect(0);
      test::SoloEngine t(*comm);
      t.engine.save(target, "s");
    });
    CHECK_MESSAGE(
        e.find(target + " exists and is not a directory (or is a link)") != std::string::npos, e);
    CHECK(fs::is_empty(dir.path / "elsewhere"));
  }
  SUBCASE("removeTree of a failed save's temporary directory swapped for a link") {
    fs::create_directory(dir.path / "elsewhere");
    std::ofstream(dir.path / "elsewhere" / "kept") << "precious\n";
    fs::create_directory_symlink(dir.path / "elsewhere", dir.path / "s.tmp-AAAAAA");
    const std::string left = checkpoint::removeTree((dir.path / "s.tmp-AAAAAA").string());
    CHECK_MESSAGE(left.find("Not a directory") != std::string::npos, left);
    CHECK(readAll(dir.path / "elsewhere" / "kept") == "precious\n");
  }
  CHECK(fs::is_symlink(link));
  CHECK(readAll(victim) == "precious\n");
}
