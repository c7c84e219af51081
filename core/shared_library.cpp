#include "core/shared_library.h"

#include <dlfcn.h>

#include "core/error.h"
#include "core/log.h"

namespace zrt {
namespace {

// dlerror()'s text, or `fallback` when it has none (dlsym found the symbol with a null value).
std::string lastDlError(const char* fallback) {
  const char* e = dlerror();
  return e ? e : fallback;
}

}  // namespace

SharedLibrary SharedLibrary::open(const std::string& soname, std::string_view whereToFind) {
  SharedLibrary lib;
  // RTLD_LOCAL: the library's symbols stay out of the global namespace, so another copy that a
  // later dlopen brings in (torch's, say) cannot bind to ours by accident. A library of the same
  // soname already loaded by someone else is the one returned, which is what a process that
  // imported torch first wants.
  lib.handle_ = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle_) {
    ZRT_THROW(ExternalError, soname, " not found or not loadable (", lastDlError("dlopen failed"),
              "): put the directory that holds it (and the libraries "
              "it needs) on LD_LIBRARY_PATH",
              whereToFind.empty() ? "" : "; ", whereToFind);
  }
  lib.soname_ = soname;
  return lib;
}

void* SharedLibrary::address(const char* name) const {
  ZRT_ENFORCE(handle_, "symbol ", name, " looked up in a SharedLibrary that is not open");
  dlerror();  // clears an earlier error, so the one read below is dlsym's
  void* p = dlsym(handle_, name);
  if (!p) {
    ZRT_THROW(ExternalError, "symbol ", name, " not found in ", soname_, " (",
              lastDlError("its address is null"),
              "): the library loaded is older than the headers ZRT was built with, or another "
              "library of that name comes first on the loader's path");
  }
  return p;
}

SharedLibrary::~SharedLibrary() { close(); }

SharedLibrary::SharedLibrary(SharedLibrary&& o) noexcept
    : handle_(o.handle_), soname_(std::move(o.soname_)) {
  o.handle_ = nullptr;
}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& o) noexcept {
  if (this != &o) {
    close();
    handle_ = o.handle_;
    soname_ = std::move(o.soname_);
    o.handle_ = nullptr;
  }
  return *this;
}

void SharedLibrary::close() noexcept {
  if (!handle_) return;
  if (dlclose(handle_) != 0)
    logError(detail::cat("dlclose(", soname_, "): ", lastDlError("failed")));
  handle_ = nullptr;
}

}  // namespace zrt
