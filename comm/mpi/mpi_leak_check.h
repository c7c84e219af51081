// LeakSanitizer and MPI's lifetime, for builds with AddressSanitizer (no-ops in any other build).
// What Open MPI allocates at start-up and drops at MPI_Finalize, in plugins it has unloaded by
// exit, is its own and not a leak of ours; LeakSanitizer's check at exit cannot tell, because a
// frame in an unloaded plugin has no library name a suppression could match, and naming Open
// MPI's libraries at all needed the slow unwinder on every malloc (four to five times the CPU of
// a test under ASan, docs/operations.md). So MpiEnvironment does not track what MPI_Init
// allocates, and checks for leaks just before MPI_Finalize, when everything Open MPI keeps is
// still reachable and a program's own objects are gone; when that check is clean, the check at
// exit is turned off. The check runs inside main, so a pointer still held in main's own frame
// counts as reachable; what a function below main leaked is reported, with its stack.
#pragma once

namespace zrt::comm {

// Allocations made while one is alive are not tracked (nests).
class UntrackedAllocations {
 public:
  UntrackedAllocations();
  ~UntrackedAllocations();
  UntrackedAllocations(const UntrackedAllocations&) = delete;
  UntrackedAllocations& operator=(const UntrackedAllocations&) = delete;
};

// Reports leaks now and returns true when there are any; when there are none, the check at exit
// is turned off (LeakSanitizer runs its final check once, here). False without AddressSanitizer.
bool checkLeaksBeforeMpiFinalize();

}  // namespace zrt::comm
