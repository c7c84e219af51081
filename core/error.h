// The error model (docs/errors.md): a few exception types, an ENFORCE macro for invariants, and
// the helpers the per-library check macros (MPI, CUDA, NCCL, io_uring) build on. Every message
// starts with "[rank R] file:line:" so a failure in a multi-rank job says where it happened.
// Thread-safe: the process rank is an atomic set once by whoever initialises communication.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zrt {

// Base of every error ZRT throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something that cannot work (bad size, bad config value, bad flag).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An I/O operation failed; errnum is the errno that caused it (0 when none applies).
class IoError : public Error {
 public:
  explicit IoError(const std::string& what, int errnum = 0) : Error(what), errnum_(errnum) {}
  int errnum() const noexcept { return errnum_; }

 private:
  int errnum_;
};

// Another rank disagreed (mismatched sizes or dtypes) or was lost.
class PeerError : public Error {
 public:
  using Error::Error;
};

// A wait gave up; the message says what it waited for.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A device (real or simulated) could not satisfy an allocation; the message holds the ledger.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// An external library (MPI, CUDA, NCCL, io_uring) returned an error code.
class ExternalError : public Error {
 public:
  using Error::Error;
};

// The rank printed in error messages; -1 until communication is initialised.
void setProcessRank(int rank) noexcept;
int processRank() noexcept;

// `message` without the "[rank R] " a ZRT error starts with, for a message that quotes another
// error after its own prefix (naming the rank once).
std::string_view withoutRankPrefix(std::string_view message) noexcept;

namespace detail {

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// "[rank R] file:line: " (or "file:line: " before the rank is known).
std::string where(const char* file, int line);

}  // namespace detail
}  // namespace zrt

// Throws `Type` with "[rank R] file:line: " and the streamed arguments.
#define ZRT_THROW(Type, ...) \
  throw Type(::zrt::detail::where(__FILE__, __LINE__) + ::zrt::detail::cat(__VA_ARGS__))

// Invariant checks: a failure is a bug or a broken precondition, reported with both values.
#define ZRT_ENFORCE(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      ZRT_THROW(::zrt::Error, "ZRT_ENFORCE(" #cond ") failed" __VA_OPT__(": ", ) \
                    __VA_ARGS__);                                                     \
    }                                                                                 \
  } while (0)

#define ZRT_ENFORCE_BINARY(op, a, b, ...)                                                    \
  do {                                                                                       \
    const auto& zrt_a_ = (a);                                                                \
    const auto& zrt_b_ = (b);                                                                \
    if (!(zrt_a_ op zrt_b_)) {                                                               \
      ZRT_THROW(::zrt::Error, "ZRT_ENFORCE(" #a " " #op " " #b ") failed: ", zrt_a_, " vs ", \
                zrt_b_ __VA_OPT__(, ": ", ) __VA_ARGS__);                                    \
    }                                                                                        \
  } while (0)

#define ZRT_ENFORCE_EQ(a, b, ...) ZRT_ENFORCE_BINARY(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ZRT_ENFORCE_NE(a, b, ...) ZRT_ENFORCE_BINARY(!=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ZRT_ENFORCE_LE(a, b, ...) ZRT_ENFORCE_BINARY(<=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ZRT_ENFORCE_LT(a, b, ...) ZRT_ENFORCE_BINARY(<, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ZRT_ENFORCE_GE(a, b, ...) ZRT_ENFORCE_BINARY(>=, a, b __VA_OPT__(, ) __VA_ARGS__)
