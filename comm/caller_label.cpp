#include "comm/caller_label.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <utility>

namespace zrt::comm {
namespace {
using Clock = std::chrono::steady_clock;

std::mutex g_mu;
std::shared_ptr<const std::string> g_label;
CallKind g_kind = CallKind::Call;
// The outermost label, kept after it ends for "in no ZRT call since <it>".
std::shared_ptr<const std::string> g_outer;
int g_depth = 0;
bool g_span = false;
Clock::time_point g_since = Clock::now();  // entered the outermost call, or left the last

bool busy() { return g_depth > 0 || g_span; }

std::atomic<int> g_tracking{0};
bool tracking() { return g_tracking.load(std::memory_order_relaxed) > 0; }

int g_blockedLane = -1;
std::uint64_t g_blockedSeq = 0;
std::uint64_t g_entries = 0;
Clock::time_point g_blockedSince{};
}  // namespace

CallerLabel::CallerLabel(std::string text, CallKind kind) {
  auto label = std::make_shared<const std::string>(std::move(text));
  std::lock_guard lock(g_mu);
  ++g_entries;
  if (!busy() && tracking()) g_since = Clock::now();
  if (g_depth++ == 0) g_outer = label;
  previous_ = std::exchange(g_label, std::move(label));
  previousKind_ = std::exchange(g_kind, kind);
}

CallerLabel::~CallerLabel() {
  std::lock_guard lock(g_mu);
  g_label = std::move(previous_);
  g_kind = previousKind_;
  --g_depth;
  if (!busy() && tracking()) g_since = Clock::now();
}

std::shared_ptr<const std::string> CallerLabel::current() {
  std::lock_guard lock(g_mu);
  return g_label;
}

void CallerLabel::beginSpan() {
  std::lock_guard lock(g_mu);
  ++g_entries;
  if (!busy() && tracking()) g_since = Clock::now();
  g_span = true;
}

void CallerLabel::endSpan() {
  std::lock_guard lock(g_mu);
  g_span = false;
  if (!busy() && tracking()) g_since = Clock::now();
}

void CallerLabel::trackActivity(int delta) {
  std::lock_guard lock(g_mu);
  if (g_tracking.fetch_add(delta) == 0 && delta > 0) g_since = Clock::now();
}

CallerLabel::Blocked::Blocked(int lane, std::uint64_t seq) {
  if (!tracking()) {
    outer_ = false;
    return;
  }
  std::lock_guard lock(g_mu);
  ++g_entries;
  outer_ = g_blockedLane < 0;  // another thread's wait, or a nested one, keeps the first
  if (!outer_) return;
  g_blockedLane = lane;
  g_blockedSeq = seq;
  g_blockedSince = Clock::now();
}

CallerLabel::Blocked::~Blocked() {
  if (!outer_) return;
  std::lock_guard lock(g_mu);
  g_blockedLane = -1;
}

CallerLabel::Activity CallerLabel::activity() {
  std::lock_guard lock(g_mu);
  Activity a;
  a.entries = g_entries;
  if (g_blockedLane >= 0) {
    a.blockedLane = g_blockedLane;
    a.blockedSeq = g_blockedSeq;
    a.blockedSeconds = std::chrono::duration<double>(Clock::now() - g_blockedSince).count();
  }
  a.inCall = busy();
  a.kind = g_depth > 0 ? g_kind : CallKind::Call;
  a.seconds = std::chrono::duration<double>(Clock::now() - g_since).count();
  if (g_depth > 0 && g_label && g_outer && g_label != g_outer)
    a.text = *g_outer + " > " + *g_label;
  else if (g_depth > 0 && g_label)
    a.text = *g_label;
  else if (g_outer)
    a.text = *g_outer;
  return a;
}

}  // namespace zrt::comm
