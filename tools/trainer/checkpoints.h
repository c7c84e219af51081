// zrt-train's checkpoint schedule: which steps save and under what tag, where a resumed run
// starts, and the check that a run will not collide with tags already in --save-dir. The saving
// and loading themselves are the Engine's (runtime/engine.h, docs/checkpoint.md).
// Thread-safety: pure functions and file reads.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::trainer {

// "step<N>": N optimizer steps done (attempted, as the data order counts them).
std::string tagForStep(std::int64_t stepsDone);

// Whether the run saves after its `stepsDone`-th step: every `saveEvery`-th (0: never) and the
// last, so a finished run always leaves its final state.
bool savesAfter(std::int64_t stepsDone, std::int64_t saveEvery, std::int64_t steps);

struct ResumePoint {
  std::string tag;              // what <dir>/latest names
  std::int64_t stepsDone = 0;   // optimizer steps attempted when it was saved
};

// The checkpoint --resume DIR continues from: the tag <dir>/latest names and its step count, read
// from the checkpoint's engine_state.json (the Engine restores its counters but does not expose
// them, and the trainer's batches are a function of that count). Throws InvalidArgument naming
// --resume when there is no checkpoint.
ResumePoint findResumePoint(const std::string& dir);

// Throws InvalidArgument naming --save-dir when it is not a directory that can be written, or
// already holds a tag this run would save (steps after `startStep` up to `steps`): the Engine
// never overwrites a tag, and finding out at the first save would lose the steps before it.
void checkSaveDir(const std::string& dir, std::int64_t saveEvery, std::int64_t startStep, std::int64_t steps);

}  // namespace zrt::trainer
