// ZRT_CHECK_MPI: every MPI call goes through it. A failure throws ExternalError with
// "[rank R] file:line", the call's text and MPI_Error_string's description of the code.
// MPI's default error handler aborts before returning; communicators ZRT creates set
// MPI_ERRORS_RETURN so this macro sees the code. Thread-safe: it throws on the calling thread.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace zrt::detail {
inline std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return cat("MPI error ", code);
  return std::string(text, static_cast<std::size_t>(len));
}
}  // namespace zrt::detail

#define ZRT_CHECK_MPI(call)                                                              \
  do {                                                                                   \
    int zrt_mpi_rc_ = (call);                                                            \
    if (zrt_mpi_rc_ != MPI_SUCCESS) {                                                    \
      ZRT_THROW(::zrt::ExternalError, "MPI call `" #call "` failed: ",                   \
                ::zrt::detail::mpiErrorText(zrt_mpi_rc_));                               \
    }                                                                                    \
  } while (0)
