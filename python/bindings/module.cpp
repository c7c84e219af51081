// zrt._zrt: the extension module behind the `zrt` package (python/zrt). Python users import
// zrt, zrt.ops; this module is its private C++ half.
#include <pybind11/pybind11.h>

#include "python/bindings/errors.h"
#include "python/bindings/module.h"

PYBIND11_MODULE(_zrt, m) {
  m.doc() = "ZRT's C++ runtime, bound for the zrt package (use zrt and zrt.ops, not this module)";
  // zrt/__init__.py refuses numpy 2 under a pybind11 older than 2.12: those read numpy's array
  // descriptors with numpy 1's layout, and every buffer crossing would be garbage.
  m.attr("pybind11_version") = PYBIND11_VERSION_MAJOR * 100 + PYBIND11_VERSION_MINOR;
  zrt::python::registerErrorTranslator();
  zrt::python::bindCpuAdam(m);
  zrt::python::bindAsyncIo(m);
  zrt::python::bindEngine(m);
  zrt::python::bindComm(m);
}
