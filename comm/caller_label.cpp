#include "comm/caller_label.h"

#include <mutex>
#include <utility>

namespace zrt::comm {
namespace {
std::mutex g_mu;
std::shared_ptr<const std::string> g_label;
}  // namespace

CallerLabel::CallerLabel(std::string text) {
  auto label = std::make_shared<const std::string>(std::move(text));
  std::lock_guard lock(g_mu);
  previous_ = std::exchange(g_label, std::move(label));
}

CallerLabel::~CallerLabel() {
  std::lock_guard lock(g_mu);
  g_label = std::move(previous_);
}

std::shared_ptr<const std::string> CallerLabel::current() {
  std::lock_guard lock(g_mu);
  return g_label;
}

}  // namespace zrt::comm
