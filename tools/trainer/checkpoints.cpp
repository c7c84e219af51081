#include "checkpoints.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::trainer {

std::string tagForStep(std::int64_t stepsDone) { return "step" + std::to_string(stepsDone); }

bool savesAfter(std::int64_t stepsDone, std::int64_t saveEvery, std::int64_t steps) {
  return stepsDone == steps || (saveEvery > 0 && stepsDone % saveEvery == 0);
}

ResumePoint findResumePoint(const std::string& dir) {
  using namespace zrt::checkpoint;
  if (!isDirectory(dir)) ZRT_THROW(InvalidArgument, "--resume ", dir, ": no such directory, so no checkpoint to resume");
  if (!pathExists(joinPath(dir, "latest")))
    ZRT_THROW(InvalidArgument, "--resume ", dir, ": no checkpoint there (", joinPath(dir, "latest"),
              " does not exist)");
  ResumePoint r;
  try {
    r.tag = resolveTag(dir, "");
    const nlohmann::json state = CheckpointReader(joinPath(dir, r.tag)).engineState();
    r.stepsDone = state.at("optimizer_steps_attempted").get<std::int64_t>();
    // Saves happen only at accumulation boundaries; anything else is not a state this loop can
    // continue from.
    if (state.at("micro_steps_done").get<std::int64_t>() != 0)
      ZRT_THROW(InvalidArgument, "saved between micro-steps");
  } catch (const std::exception& e) {
    ZRT_THROW(InvalidArgument, "--resume ", dir, ": ", e.what());
  }
  if (r.stepsDone < 0) ZRT_THROW(InvalidArgument, "--resume ", dir, ": step count ", r.stepsDone, " is negative");
  return r;
}

void checkSaveDir(const std::string& dir, std::int64_t saveEvery, std::int64_t startStep, std::int64_t steps) {
  using namespace zrt::checkpoint;
  if (!pathExists(dir)) {
    // The Engine creates the directory itself, but not its parents: check those now.
    const std::size_t slash = dir.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
    if (!isDirectory(parent) || access(parent.c_str(), W_OK | X_OK) != 0)
      ZRT_THROW(InvalidArgument, "--save-dir ", dir, ": cannot be created (", parent, " is not a writable directory)");
    return;
  }
  if (!isDirectory(dir)) ZRT_THROW(InvalidArgument, "--save-dir ", dir, ": not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    ZRT_THROW(InvalidArgument, "--save-dir ", dir, ": not writable (", std::strerror(errno), ")");
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) ZRT_THROW(InvalidArgument, "--save-dir ", dir, ": cannot list (", std::strerror(errno), ")");
  while (const dirent* e = readdir(d.get())) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(0, 4, "step") != 0) continue;
    if (name.find_first_not_of("0123456789", 4) != std::string::npos || name.size() > 4 + 18) continue;
    const std::int64_t n = std::stoll(name.substr(4));
    if (name != tagForStep(n)) continue;  // "step06" is not a tag this run writes
    if (n > startStep && n <= steps && savesAfter(n, saveEvery, steps))
      ZRT_THROW(InvalidArgument, "--save-dir ", dir, " already holds ", name,
                ", which this run would save (a checkpoint is never overwritten): use another "
                "--save-dir, remove it, or --resume");
  }
}

}  // namespace zrt::trainer
