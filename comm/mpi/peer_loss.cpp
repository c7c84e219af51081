#include "comm/mpi/peer_loss.h"

#include <atomic>
#include <mutex>

namespace zrt::comm {
namespace {

std::atomic<bool> g_lost{false};

std::mutex& reportMutex() {
  static std::mutex mu;
  return mu;
}

std::string& firstReport() {
  static std::string text;
  return text;
}

}  // namespace

void notePeerLoss(const std::string& report) {
  {
    std::lock_guard lock(reportMutex());
    if (firstReport().empty()) firstReport() = report;
  }
  g_lost.store(true);
}

bool peerLost() noexcept { return g_lost.load(); }

std::string peerLossReport() {
  std::lock_guard lock(reportMutex());
  return firstReport();
}

}  // namespace zrt::comm
