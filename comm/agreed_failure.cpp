#include "comm/agreed_failure.h"

#include <atomic>

namespace zrt::comm {
namespace {
std::atomic<bool> g_agreed{false};
}  // namespace

void markAgreedFailure() noexcept { g_agreed.store(true); }
void clearAgreedFailure() noexcept { g_agreed.store(false); }
bool agreedFailure() noexcept { return g_agreed.load(); }

}  // namespace zrt::comm
