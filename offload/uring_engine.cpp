#include "offload/uring_engine.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "offload/file_descriptor.h"
#include "offload/uring_check.h"
#include "core/error.h"
#include "core/log.h"

namespace zrt::offload {
namespace {

// user_data of the eventfd read; units are pointers, never this small odd value.
constexpr std::uint64_t kWakeTag = 1;

// The move-only owner of one ring (io_uring_queue_exit on destruction).
class Ring {
 public:
  explicit Ring(unsigned entries) {
    // Newest flags first, dropping those this kernel rejects with EINVAL: single issuer with
    // deferred task work (6.1), cooperative task running (5.19), plain. CLAMP caps a ring
    // asked larger than the kernel's largest (32768) instead of failing.
    const unsigned flagSets[] = {
        IORING_SETUP_CLAMP | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_CLAMP | IORING_SETUP_COOP_TASKRUN, IORING_SETUP_CLAMP};
    int rc = -EINVAL;
    for (unsigned flags : flagSets) {
      io_uring_params params{};
      params.flags = flags;
      rc = io_uring_queue_init_params(entries, &ring_, &params);
      if (rc != -EINVAL) break;
    }
    ZRT_CHECK_URING(rc);
  }
  ~Ring() { io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
};

struct FixedRegion {
  std::uintptr_t begin;
  std::uintptr_t end;
  int index;
};

// One ring of `depth` units plus one slot for a wake-up read on an eventfd, so another thread
// can interrupt a blocked reap (new work arrived).
class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(std::size_t depth);

  std::string_view name() const override { return "io_uring"; }
  std::size_t depth() const override { return depth_; }
  int registerBuffers(std::span<const iovec> buffers) override;
  void prepare(IoUnit& unit) override;
  QueueResult queue(IoUnit& unit) override;
  void commit() override { submitPending(); }
  void reap(std::size_t minEvents, std::chrono::milliseconds timeout,
            std::vector<IoUnit*>& done) override;
  void wake() override;

 private:
  void armWake();
  void submitPending();

  std::size_t depth_;
  Ring ring_;
  FileDescriptor wakeFd_;
  std::uint64_t wakeValue_ = 0;
  std::size_t unsubmitted_ = 0;  // entries prepared, not yet accepted by the kernel
  std::size_t outstanding_ = 0;  // units queued or in flight
  std::vector<FixedRegion> fixed_;  // sorted by begin
};

UringEngine::UringEngine(std::size_t depth)
    : depth_(depth), ring_(static_cast<unsigned>(depth + 1)) {
  // Blocking on purpose: io_uring answers EAGAIN for a read on an O_NONBLOCK file instead of
  // waiting for it to become readable.
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) ZRT_THROW(IoError, "eventfd for the io_uring wake-up failed: ", std::strerror(errno));
  wakeFd_ = FileDescriptor(fd);
  armWake();
  submitPending();
}

void UringEngine::armWake() {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {
    // Only a clamped ring (queue depth 32768) can be full here: send what is queued first.
    submitPending();
    sqe = io_uring_get_sqe(ring_.get());
  }
  ZRT_ENFORCE(sqe != nullptr, "no submission slot left for the wake-up read");
  io_uring_prep_read(sqe, wakeFd_.get(), &wakeValue_, sizeof(wakeValue_), 0);
  io_uring_sqe_set_data64(sqe, kWakeTag);
  ++unsubmitted_;
}

// Sends prepared entries; a busy kernel (EAGAIN/EBUSY: completions must be reaped first) or a
// signal leaves them for the next call.
void UringEngine::submitPending() {
  if (unsubmitted_ == 0) return;
  const int rc = io_uring_submit(ring_.get());
  if (rc == -EAGAIN || rc == -EBUSY || rc == -EINTR) return;
  unsubmitted_ -= static_cast<std::size_t>(ZRT_CHECK_URING(rc));
}

int UringEngine::registerBuffers(std::span<const iovec> buffers) {
  if (buffers.empty()) return 0;
  const int rc = io_uring_register_buffers(ring_.get(), buffers.data(),
                                           static_cast<unsigned>(buffers.size()));
  if (rc < 0) return -rc;
  fixed_.clear();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto begin = reinterpret_cast<std::uintptr_t>(buffers[i].iov_base);
    fixed_.push_back({begin, begin + buffers[i].iov_len, static_cast<int>(i)});
  }
  std::sort(fixed_.begin(), fixed_.end(),
            [](const FixedRegion& a, const FixedRegion& b) { return a.begin < b.begin; });
  return 0;
}

void UringEngine::prepare(IoUnit& unit) {
  unit.bufIndex = -1;
  const auto& fixed = fixed_;
  if (fixed.empty()) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(unit.buf);
  auto it = std::upper_bound(fixed.begin(), fixed.end(), begin,
                             [](std::uintptr_t v, const FixedRegion& r) { return v < r.begin; });
  if (it == fixed.begin()) return;
  --it;
  if (begin >= it->begin && begin + unit.len <= it->end) unit.bufIndex = it->index;
}

QueueResult UringEngine::queue(IoUnit& unit) {
  if (outstanding_ >= depth_) return QueueResult::Busy;
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) return QueueResult::Busy;
  const auto len = static_cast<unsigned>(unit.len);
  if (unit.dir == IoDir::Read) {
    if (unit.bufIndex >= 0) io_uring_prep_read_fixed(sqe, unit.fd, unit.buf, len, unit.offset, unit.bufIndex);
    else io_uring_prep_read(sqe, unit.fd, unit.buf, len, unit.offset);
  } else {
    if (unit.bufIndex >= 0) io_uring_prep_write_fixed(sqe, unit.fd, unit.buf, len, unit.offset, unit.bufIndex);
    else io_uring_prep_write(sqe, unit.fd, unit.buf, len, unit.offset);
  }
  io_uring_sqe_set_data(sqe, &unit);
  ++unsubmitted_;
  ++outstanding_;
  return QueueResult::Queued;
}

void UringEngine::reap(std::size_t minEvents, std::chrono::milliseconds timeout,
                       std::vector<IoUnit*>& done) {
  io_uring* ring = ring_.get();
  submitPending();
  if (minEvents > 0) {
    __kernel_timespec ts{};
    ts.tv_sec = timeout.count() / 1000;
    ts.tv_nsec = (timeout.count() % 1000) * 1'000'000;
    io_uring_cqe* cqe = nullptr;
    // Waits for `minEvents` completions (a wake-up counts as one) or the timeout.
    const int rc = io_uring_wait_cqes(ring, &cqe, static_cast<unsigned>(minEvents), &ts, nullptr);
    if (rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) ZRT_CHECK_URING(rc);
  } else {
    // Runs deferred completion work without waiting (needed with DEFER_TASKRUN).
    const int rc = io_uring_get_events(ring);
    if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) ZRT_CHECK_URING(rc);
  }
  unsigned head = 0;
  unsigned seen = 0;
  bool rearm = false;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(ring, head, cqe) {
    ++seen;
    if (cqe->user_data == kWakeTag) {
      // A failed wake-up read (a broken eventfd) is not re-armed: it would fail again at once
      // and turn every reap into a spin. New work is then found at the next reap time-out.
      if (cqe->res >= 0) {
        rearm = true;
      } else {
        warnOnce("uring-wake-read",
                 zrt::detail::cat("the io_uring ring's wake-up read failed: ",
                                  std::strerror(-cqe->res),
                                  "; new requests wait for the ring's next time-out"));
      }
      continue;
    }
    auto* unit = static_cast<IoUnit*>(io_uring_cqe_get_data(cqe));
    unit->result = cqe->res;
    --outstanding_;
    done.push_back(unit);
  }
  io_uring_cq_advance(ring, seen);
  if (rearm) {
    armWake();
    submitPending();
  }
}

void UringEngine::wake() {
  const std::uint64_t one = 1;
  // The eventfd is blocking, so the write cannot answer EAGAIN (its counter would have to reach
  // 2^64-2 first); a signal is retried. Anything else is a broken descriptor: say so once, and
  // the ring still finds the new work when its reap times out.
  for (;;) {
    if (::write(wakeFd_.get(), &one, sizeof(one)) == static_cast<ssize_t>(sizeof(one)))
      return;
    if (errno == EINTR) continue;
    warnOnce("uring-wake", zrt::detail::cat("waking an io_uring ring (write to eventfd ",
                                            wakeFd_.get(), ") failed: ",
                                            std::strerror(errno),
                                            "; new requests wait for the ring's next time-out"));
    return;
  }
}

}  // namespace

std::unique_ptr<IoEngine> makeUringEngine(std::size_t depth) {
  return std::make_unique<UringEngine>(depth);
}

int probeUring() {
  io_uring ring{};
  const int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) return -rc;
  io_uring_queue_exit(&ring);
  return 0;
}

}  // namespace zrt::offload
