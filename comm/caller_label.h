// What the caller of the collectives is doing, for the hang reports: a collective that never
// completes is named by the watchdog as "allGather #82", which says nothing to whoever called
// the library above comm/. That library (the Engine) sets a label for the length of each of its
// calls ("Engine::parameters(module 'h.3.attn'), micro-step 7 of step 2"); each operation keeps
// the label current when it was posted, and the watchdog's report names it.
// Thread-safety: any thread. The label is process-wide, not per thread, because a library may
// post from helper threads on its caller's behalf; labels nest (the inner one wins until it ends).
#pragma once

#include <memory>
#include <string>

namespace zrt::comm {

class CallerLabel {
 public:
  explicit CallerLabel(std::string text);
  ~CallerLabel();
  CallerLabel(const CallerLabel&) = delete;
  CallerLabel& operator=(const CallerLabel&) = delete;

  // The label now (nullptr when none is set); cheap enough to take at every post.
  static std::shared_ptr<const std::string> current();

 private:
  std::shared_ptr<const std::string> previous_;
};

}  // namespace zrt::comm
