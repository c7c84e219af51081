// The pieces of zrt._zrt, one binding file each (bindings/*.cpp), assembled in module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace zrt::python {

void bindCpuAdam(pybind11::module_& m);
void bindAsyncIo(pybind11::module_& m);
void bindEngine(pybind11::module_& m);
void bindComm(pybind11::module_& m);

// MPI for the package: initialised on first use (MPI_THREAD_MULTIPLE), finalised by zrt's exit
// handler (engine.cpp).
void ensureMpi();
// Frees the communicator the package's collectives use (comm.cpp), before MPI_Finalize.
void releasePackageComm();
// Makes that communicator (collective: zrt.initialize calls it on every rank).
void ensurePackageComm();

}  // namespace zrt::python
