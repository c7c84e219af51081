// SharedLibrary: the move-only owner of one dlopen handle, for a library ZRT loads at its first
// use instead of linking (NCCL and cuBLAS: hundreds of megabytes that a program which never
// touches a GPU must not need, and that on a machine with torch's CUDA wheels live in
// site-packages rather than on the loader's path). open() and symbol() throw ExternalError naming
// the library, the symbol and dlerror()'s text; the destructor closes the handle.
// Thread-safety: open() and symbol() may be called from any thread (dlerror() is per thread);
// moving and destroying need the one owner.
#pragma once

#include <string>
#include <string_view>

// The string a macro expands to: a soname from a header's version macro, and the symbol behind a
// name the header redefines (cublas_v2.h's cublasSgemm is cublasSgemm_v2).
#define ZRT_EXPANDED_STRING_(x) #x
#define ZRT_EXPANDED_STRING(x) ZRT_EXPANDED_STRING_(x)
// `function` from `library` (a SharedLibrary), typed by the header's declaration of it, so each
// pointer's signature stays in step with the header the code was built against.
#define ZRT_LIBRARY_FUNCTION(library, function) \
  (library).symbol<decltype(&::function)>(ZRT_EXPANDED_STRING(function))

namespace zrt {

class SharedLibrary {
 public:
  SharedLibrary() = default;
  // dlopen(soname) with every symbol bound now, so that a library too old for a symbol fails
  // here rather than at a call. A failure's message says how to make the library findable;
  // `whereToFind` adds where this one usually lives (a package, a wheel's folder).
  static SharedLibrary open(const std::string& soname, std::string_view whereToFind = {});
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& o) noexcept;
  SharedLibrary& operator=(SharedLibrary&& o) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of `name`, as a `Fn` (a function pointer type, for which decltype(&f) of the
  // header's declaration keeps the signature in step with the header).
  template <class Fn>
  Fn symbol(const char* name) const {
    return reinterpret_cast<Fn>(address(name));
  }
  // The address of `name`; throws ExternalError naming the library and the symbol when the
  // library does not define it.
  void* address(const char* name) const;

  const std::string& soname() const { return soname_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  void close() noexcept;

  void* handle_ = nullptr;
  std::string soname_;
};

}  // namespace zrt
