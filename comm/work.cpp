#include "comm/work.h"

#include <optional>
#include <thread>
#include <vector>

#include "comm/caller_label.h"
#include "core/device.h"
#include "core/error.h"
#include "core/timing.h"

namespace zrt::comm {

std::string WorkState::description() {
  std::lock_guard lock(mu_);
  if (describe_) {
    description_ = describe_();
    describe_ = nullptr;
  }
  return description_;
}

void WorkState::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void WorkState::setDevicePoll(std::function<bool()> poll, std::shared_ptr<Event> event) {
  std::lock_guard lock(mu_);
  poll_ = std::move(poll);
  event_ = std::move(event);
}

void WorkState::pollDevice() {
  if (done_ || !poll_) return;
  try {
    if (poll_()) done_ = true;
  } catch (...) {
    done_ = true;
    error_ = std::current_exception();
  }
}

bool WorkState::isCompleted() {
  std::lock_guard lock(mu_);
  pollDevice();
  return done_;
}

void WorkState::wait(std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  std::unique_lock lock(mu_);
  if (poll_) {
    // Device work: poll its event with a growing sleep (at most 200 us of added latency).
    auto sleep = std::chrono::microseconds(1);
    for (pollDevice(); !done_; pollDevice()) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      lock.unlock();
      std::this_thread::sleep_for(sleep);
      if (sleep < std::chrono::microseconds(200)) sleep *= 2;
      lock.lock();
    }
  } else if (!done_) {
    // Host work: waits for the backend's thread to call finish().
    std::optional<CallerLabel::Blocked> blocked;  // the label's lock nests inside mu_ only
    if (lane_ >= 0) blocked.emplace(lane_, seq_);
    cv_.wait_until(lock, deadline, [&] { return done_; });
  }
  if (!done_) {
    const double waited = secondsSince(start);
    if (describe_) {
      description_ = describe_();
      describe_ = nullptr;
    }
    const TimeoutError error(detail::cat(description_, " not complete after waiting ", waited, " s"));
    if (onTimeout_) {
      lock.unlock();
      onTimeout_(error.what());
    }
    throw error;
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr WorkState::exception() {
  std::lock_guard lock(mu_);
  pollDevice();
  return error_;
}

void waitOnStream(const Work& work, Stream& stream, std::chrono::milliseconds timeout) {
  if (Event* event = work.deviceEvent()) {
    stream.waitEvent(*event);
    return;
  }
  work.wait(timeout);
}

void waitAll(const std::vector<Work>& works, std::chrono::milliseconds timeout) {
  completeAll(works.size(), [&](std::size_t k) { works[k].wait(timeout); });
}

void completeAll(std::size_t n, const std::function<void(std::size_t)>& complete) {
  std::exception_ptr first;
  for (std::size_t k = 0; k < n; ++k) {
    try {
      complete(k);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace zrt::comm
