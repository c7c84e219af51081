// MpiReduceOps: the MPI datatype and sum operation for each of ZRT's element types. fp32 is
// MPI_FLOAT with MPI_SUM. MPI has no fp16 or bf16 sum, so those travel as MPI_UINT16_T and
// reduce with user-defined commutative operations that add in fp32 and round once per pairwise
// step (core/element_arithmetic.h). The owner of the two MPI_Op handles (move-only; freed on
// destruction while MPI is still initialised).
// Thread-safety: read-only after construction.
#pragma once

#include <mpi.h>

#include "core/dtype.h"

namespace zrt::comm {

class MpiReduceOps {
 public:
  MpiReduceOps();
  ~MpiReduceOps();
  MpiReduceOps(MpiReduceOps&& other) noexcept;
  MpiReduceOps& operator=(MpiReduceOps&&) = delete;
  MpiReduceOps(const MpiReduceOps&) = delete;
  MpiReduceOps& operator=(const MpiReduceOps&) = delete;

  static MPI_Datatype datatype(DType dtype);
  MPI_Op sum(DType dtype) const;

 private:
  MPI_Op sumF16_ = MPI_OP_NULL;
  MPI_Op sumBF16_ = MPI_OP_NULL;
};

}  // namespace zrt::comm
