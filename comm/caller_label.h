// What the caller of the collectives is doing, for the hang reports: a collective that never
// completes is named by the watchdog as "allGather #82", which says nothing to whoever called
// the library above comm/. That library (the Engine, the Python package) sets a label for the
// length of each of its calls ("Engine::parameters(module 'h.3.attn'), micro-step 7 of step 2");
// each operation keeps the label current when it was posted, and the watchdog's report names it.
// The same labels tell the watchdog's divergence probe (comm/mpi/watchdog.h) what this process
// is doing when a peer asks: in a ZRT call (and which), closing its engine, waiting in a
// collective of another communicator, or in no ZRT call since when.
// Thread-safety: any thread. The label is process-wide, not per thread, because a library may
// post from helper threads on its caller's behalf; labels nest (the inner one wins until it ends).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zrt::comm {

// What a call means to a peer that waits for this process in a collective.
enum class CallKind : std::uint8_t {
  Call,         // a ZRT call: it may post the collective the peer waits for
  Closing,      // this process's use of the communicators is ending (close, destruction, exit)
  WaitsElsewhere,  // blocked in a collective of another communicator (the package's comm)
};

class CallerLabel {
 public:
  explicit CallerLabel(std::string text, CallKind kind = CallKind::Call);
  ~CallerLabel();
  CallerLabel(const CallerLabel&) = delete;
  CallerLabel& operator=(const CallerLabel&) = delete;

  // The label now (nullptr when none is set); cheap enough to take at every post.
  static std::shared_ptr<const std::string> current();

  // A span of the caller's own work that belongs to a ZRT call although no label is set (the
  // Engine's micro-step: the caller computes between its calls): the process counts as in a
  // call from beginSpan to endSpan. Spans do not nest with each other.
  static void beginSpan();
  static void endSpan();

  // The caller's thread is blocked waiting for operation `seq` of the communicator whose
  // progress thread is number `lane` in this process (ProgressThread::lane(); the same number on
  // every rank, communicators being made collectively in one order). While a peer waits for
  // this rank on another communicator, this says the rank cannot come before that operation.
  class Blocked {
   public:
    Blocked(int lane, std::uint64_t seq);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;

   private:
    bool outer_;
  };

  struct Activity {
    int blockedLane = -1;         // Blocked: what the caller waits for, and for how long
    std::uint64_t blockedSeq = 0;
    double blockedSeconds = 0;
    bool inCall = false;          // a label or a span is set
    CallKind kind = CallKind::Call;  // of the innermost label
    double seconds = 0;           // in the outermost call, or since the last one ended
    std::string text;             // "outer > inner" label, or the last one when not in a call
    std::uint64_t entries = 0;    // labels, spans and tracked blocked waits entered so far (the
                                  // step's bookkeeping, counted for zrt-engine-bench's cost figure)
  };
  static Activity activity();

  // Whether anything reads the activity's times and blocked waits (a watchdog with its
  // divergence probe on); without a reader the labels skip the clock and Blocked does nothing,
  // so zrt.divergence_timeout_s = 0 takes the whole check off the step's path. Counted: each
  // watchdog adds 1 while its probe is on and takes it back after.
  static void trackActivity(int delta);

 private:
  std::shared_ptr<const std::string> previous_;
  CallKind previousKind_;
};

}  // namespace zrt::comm
