// The null I/O engine (null_engine.cpp): moves no bytes and reports every unit as fully
// transferred, like fio's null engine. It measures and tests the framework above the engines
// (splitting, scheduling, completion) without a disk. Thread-safety: as IoEngine.
#pragma once

#include <cstddef>
#include <memory>

#include "offload/io_engine.h"

namespace zrt::offload {

std::unique_ptr<IoEngine> makeNullEngine(std::size_t depth);

}  // namespace zrt::offload
