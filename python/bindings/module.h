// The pieces of zrt._zrt, one binding file each (bindings/*.cpp), assembled in module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace zrt::python {

void bindCpuAdam(pybind11::module_& m);
void bindAsyncIo(pybind11::module_& m);
void bindEngine(pybind11::module_& m);

}  // namespace zrt::python
