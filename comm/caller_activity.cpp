#include "comm/caller_activity.h"

#include <mutex>
#include <utility>

namespace zrt::comm {
namespace {
std::mutex g_mu;
std::shared_ptr<const std::string> g_current;
}  // namespace

CallerActivity::CallerActivity(std::string what) {
  auto next = std::make_shared<const std::string>(std::move(what));
  std::lock_guard lock(g_mu);
  previous_ = std::exchange(g_current, std::move(next));
}

CallerActivity::~CallerActivity() {
  std::lock_guard lock(g_mu);
  g_current = std::move(previous_);
}

std::shared_ptr<const std::string> currentCallerActivity() {
  std::lock_guard lock(g_mu);
  return g_current;
}

}  // namespace zrt::comm
