// ZRT's C++ exceptions as the Python classes of zrt/errors.py, message unchanged.
#pragma once

#include <pybind11/pybind11.h>

namespace zrt::python {

void registerErrorTranslator();

}  // namespace zrt::python
