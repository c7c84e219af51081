// What the program posting collectives is doing, for hang reports. "allGather #82 has not
// completed" does not tell a user which of their calls hung; the Engine's public calls name
// themselves here ("Engine::parameters(module 'h.3.attn'), micro-step 2 of step 7") and each
// collective remembers the activity it was posted under, which the watchdog's report prints.
// Process-wide rather than per thread: collectives are posted from the caller's thread and from
// helper threads working for the same call (prefetches, bucket flushes).
// Thread-safety: any thread; the scopes of one activity nest on the caller's thread.
#pragma once

#include <memory>
#include <string>

namespace zrt::comm {

class CallerActivity {
 public:
  // Sets the activity for this scope; the one it replaced comes back when the scope ends.
  explicit CallerActivity(std::string what);
  ~CallerActivity();
  CallerActivity(const CallerActivity&) = delete;
  CallerActivity& operator=(const CallerActivity&) = delete;

 private:
  std::shared_ptr<const std::string> previous_;
};

// The activity now; null when none is set. Cheap (a shared pointer's copy), so every posted
// collective can keep it.
std::shared_ptr<const std::string> currentCallerActivity();

}  // namespace zrt::comm
