// Which single-copy mechanism Open MPI's shared-memory transport (btl vader) uses in this run:
// raw MPI's large intra-node messages are one copy with cma/xpmem/knem and two (through a shared
// fragment) with none, so the raw-MPI baseline means little without it.
#pragma once

#include <string>

namespace zrt::bench {

// "cma", "xpmem", "knem", "none", ... with where the answer came from, e.g.
// "cma (MPI_T cvar btl_vader_single_copy_mechanism)"; "unknown (...)" when neither MPI_T nor the
// environment says (another MPI, or Open MPI without vader). Call after MPI_Init.
std::string singleCopyMechanism();

}  // namespace zrt::bench
