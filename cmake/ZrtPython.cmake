# Decides ZRT_HAVE_PYTHON from ZRT_BUILD_PYTHON: whether python/ (the `zrt` package) is built.
# Never in the sanitizer, TSan or fuzz trees: the extension would need the sanitizer runtime
# loaded before the interpreter starts. AUTO builds it where pybind11's CMake package and Python's
# development headers are found; ON makes their absence an error.
set(ZRT_HAVE_PYTHON OFF)
if(NOT ZRT_BUILD_PYTHON STREQUAL "OFF" AND NOT ZRT_SANITIZE AND NOT ZRT_TSAN AND NOT ZRT_FUZZ)
  set(_zrt_python_required "")
  if(ZRT_BUILD_PYTHON STREQUAL "ON")
    set(_zrt_python_required REQUIRED)
  endif()
  # The interpreter the tests use, when there is one: the venv scripts/install-deps.sh makes
  # (ZRT_VENV, default .venv; it sees Debian's python3-torch). The extension is built for that
  # Python's version. scikit-build-core passes its own in Python_EXECUTABLE.
  set(_zrt_venv $ENV{ZRT_VENV})
  if(NOT _zrt_venv)
    set(_zrt_venv ${PROJECT_SOURCE_DIR}/.venv)
  endif()
  if(NOT Python_EXECUTABLE AND EXISTS ${_zrt_venv}/bin/python3)
    set(Python_EXECUTABLE ${_zrt_venv}/bin/python3)
  endif()
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module ${_zrt_python_required})
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 2.6 CONFIG ${_zrt_python_required})
  endif()
  # DLPack's header (one file, the tensor exchange format torch speaks): Debian's libdlpack-dev.
  find_path(ZRT_DLPACK_INCLUDE_DIR dlpack/dlpack.h)
  if(NOT ZRT_DLPACK_INCLUDE_DIR AND _zrt_python_required)
    message(FATAL_ERROR "ZRT_BUILD_PYTHON=ON: dlpack/dlpack.h not found (Debian: libdlpack-dev, which "
                        "scripts/install-deps.sh installs; elsewhere set ZRT_DLPACK_INCLUDE_DIR)")
  endif()
  if(Python_FOUND AND pybind11_FOUND AND ZRT_DLPACK_INCLUDE_DIR)
    set(ZRT_HAVE_PYTHON ON)
  elseif(ZRT_BUILD_PYTHON STREQUAL "AUTO")
    message(STATUS "ZRT: the Python package is not built: pybind11 (pybind11-dev), Python's headers "
                   "(python3-dev) or DLPack's (libdlpack-dev) not found; scripts/install-deps.sh installs them")
  endif()
endif()
