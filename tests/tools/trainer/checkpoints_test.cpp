// The trainer's checkpoint schedule (tools/trainer/checkpoints.h): tags, which steps save, and the
// refusals before training, against cases worked by hand.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "checkpoints.h"
#include "core/error.h"
#include "runtime/checkpoint/file_io.h"

using namespace zrt::trainer;

namespace {

struct TempDir {
  std::string path = zrt::checkpoint::makeTempDirectory("/tmp", "zrt-trainer-ckpt-test-");
  ~TempDir() { zrt::checkpoint::removeTree(path); }
};

std::string refusal(auto&& f) {
  try {
    f();
  } catch (const zrt::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("tags and the steps that save: every K-th and the last") {
  CHECK(tagForStep(0) == "step0");
  CHECK(tagForStep(1234) == "step1234");
  // --steps 10 --save-every 4: after 4, 8 and 10.
  std::string saved;
  for (int n = 1; n <= 10; ++n)
    if (savesAfter(n, 4, 10)) saved += std::to_string(n) + " ";
  CHECK(saved == "4 8 10 ");
  // Without --save-every only the last.
  CHECK_FALSE(savesAfter(5, 0, 10));
  CHECK(savesAfter(10, 0, 10));
}

TEST_CASE("--save-dir: refused when it would collide with a tag this run saves, or cannot be written") {
  TempDir t;
  CHECK(refusal([&] { checkSaveDir(t.path, 3, 0, 6); }).empty());
  CHECK(refusal([&] { checkSaveDir(t.path + "/sub", 3, 0, 6); }).empty());  // created by the engine
  CHECK(mentions(refusal([&] { checkSaveDir("/nonexistent/a/b", 3, 0, 6); }), "--save-dir /nonexistent/a/b: cannot be created"));
  ::mkdir((t.path + "/step3").c_str(), 0700);
  CHECK(mentions(refusal([&] { checkSaveDir(t.path, 3, 0, 6); }), "already holds step3"));
  // A resumed run from step 3 saves only 6; --save-every 4 over 6 steps saves 4 and 6.
  CHECK(refusal([&] { checkSaveDir(t.path, 3, 3, 6); }).empty());
  CHECK(refusal([&] { checkSaveDir(t.path, 4, 0, 6); }).empty());
  ::mkdir((t.path + "/step03").c_str(), 0700);  // not a tag the trainer writes
  CHECK(refusal([&] { checkSaveDir(t.path, 3, 3, 6); }).empty());
  ::rmdir((t.path + "/step3").c_str());
  ::rmdir((t.path + "/step03").c_str());
  const std::string file = t.path + "/file";
  std::ofstream(file) << "x";
  CHECK(mentions(refusal([&] { checkSaveDir(file, 3, 0, 6); }), "not a directory"));
  ::unlink(file.c_str());
}

TEST_CASE("--resume: a directory without a checkpoint is refused naming the flag") {
  TempDir t;
  CHECK(mentions(refusal([&] { findResumePoint("/nonexistent/ckpt"); }), "--resume /nonexistent/ckpt: no such directory"));
  CHECK(mentions(refusal([&] { findResumePoint(t.path); }), "--resume " + t.path + ": no checkpoint there"));
  std::ofstream(t.path + "/latest") << "step7\n";
  CHECK(mentions(refusal([&] { findResumePoint(t.path); }), "--resume " + t.path + ": "));
  ::unlink((t.path + "/latest").c_str());
}
