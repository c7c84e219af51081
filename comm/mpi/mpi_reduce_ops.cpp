#include "comm/mpi/mpi_reduce_ops.h"

#include "comm/mpi_check.h"
#include "core/element_arithmetic.h"
#include "core/log.h"

namespace zrt::comm {
namespace {

// MPI calls these with `len` elements of `in` to add into `inout`.
void sumF16(void* in, void* inout, int* len, MPI_Datatype*) {
  sumPair(DType::F16, in, inout, static_cast<std::size_t>(*len));
}
void sumBF16(void* in, void* inout, int* len, MPI_Datatype*) {
  sumPair(DType::BF16, in, inout, static_cast<std::size_t>(*len));
}

void freeOp(MPI_Op& op) noexcept {
  if (op == MPI_OP_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    const int rc = MPI_Op_free(&op);
    if (rc != MPI_SUCCESS) logError(detail::cat("MPI_Op_free: ", detail::mpiErrorText(rc)));
  }
  op = MPI_OP_NULL;
}

}  // namespace

MpiReduceOps::MpiReduceOps() {
  ZRT_CHECK_MPI(MPI_Op_create(&sumF16, /*commute=*/1, &sumF16_));
  ZRT_CHECK_MPI(MPI_Op_create(&sumBF16, /*commute=*/1, &sumBF16_));
}

MpiReduceOps::~MpiReduceOps() {
  freeOp(sumF16_);
  freeOp(sumBF16_);
}

MpiReduceOps::MpiReduceOps(MpiReduceOps&& other) noexcept
    : sumF16_(other.sumF16_), sumBF16_(other.sumBF16_) {
  other.sumF16_ = MPI_OP_NULL;
  other.sumBF16_ = MPI_OP_NULL;
}

MPI_Datatype MpiReduceOps::datatype(DType dtype) {
  return dtype == DType::F32 ? MPI_FLOAT : MPI_UINT16_T;
}

MPI_Op MpiReduceOps::sum(DType dtype) const {
  switch (dtype) {
    case DType::F32: return MPI_SUM;
    case DType::F16: return sumF16_;
    case DType::BF16: return sumBF16_;
  }
  return MPI_OP_NULL;
}

}  // namespace zrt::comm
