#include "comm/mpi/mpi_leak_check.h"

// GCC says AddressSanitizer is on with __SANITIZE_ADDRESS__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define ZRT_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZRT_LSAN 1
#endif
#endif
#if defined(ZRT_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

namespace zrt::comm {

#if defined(ZRT_LSAN)
UntrackedAllocations::UntrackedAllocations() { __lsan_disable(); }
UntrackedAllocations::~UntrackedAllocations() { __lsan_enable(); }

bool checkLeaksBeforeMpiFinalize() {
  if (__lsan_do_recoverable_leak_check() != 0) return true;  // reported; the check at exit stays on
  __lsan_do_leak_check();  // finds nothing either, and turns the check at exit off
  return false;
}
#else
UntrackedAllocations::UntrackedAllocations() = default;
UntrackedAllocations::~UntrackedAllocations() = default;
bool checkLeaksBeforeMpiFinalize() { return false; }
#endif

}  // namespace zrt::comm
