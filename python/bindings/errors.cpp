#include "python/bindings/errors.h"

#include <exception>

#include "core/error.h"

namespace py = pybind11;

namespace zrt::python {
namespace {

// The class lives in Python (zrt.errors) so it can derive from both zrt.Error and the builtin
// a Python user would catch (ValueError, OSError, TimeoutError, MemoryError).
void raise(const char* cls, const std::exception& e) {
  const py::object type = py::module_::import("zrt.errors").attr(cls);
  PyErr_SetString(type.ptr(), e.what());
}

}  // namespace

void registerErrorTranslator() {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    // Most derived first: every class below is a zrt::Error.
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      raise("InvalidArgument", e);
    } catch (const IoError& e) {
      raise("IoError", e);
    } catch (const PeerError& e) {
      raise("PeerError", e);
    } catch (const TimeoutError& e) {
      raise("TimeoutError", e);
    } catch (const OutOfMemory& e) {
      raise("OutOfMemory", e);
    } catch (const ExternalError& e) {
      raise("ExternalError", e);
    } catch (const Error& e) {
      raise("Error", e);
    }
    // Anything else falls through to pybind11's own translators (RuntimeError, ValueError...).
  });
}

}  // namespace zrt::python
