// The mean over ranks of a few doubles (the step's loss, the validation loss), through the
// Communicator, which moves fp32, fp16 and bf16 only: each value travels as a float and the float
// of its remainder (about 48 bits together), is gathered from every rank and summed in double
// here. So a 2-rank run prints the loss of a 1-rank run to ~1e-12, not to fp32's ~1e-7, which an
// fp32 all-reduce would round the sum to. A blocking collective, bounded by the communicator's
// timeout; every rank calls it in the same order.
#pragma once

#include <vector>

#include "comm/communicator.h"

namespace zrt::trainer {

std::vector<double> meanOverRanks(comm::Communicator& comm, const std::vector<double>& mine);

}  // namespace zrt::trainer
