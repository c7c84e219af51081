# Finds every external dependency once, so folder CMakeLists only link imported targets.
# The same finds run again from zrtConfig.cmake for users of the installed package.

list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})

find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(LibUring REQUIRED)
find_package(XxHash REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
if(ZRT_BUILD_TOOLS OR ZRT_BUILD_TESTS)
  find_package(CLI11 REQUIRED)
endif()
if(ZRT_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()

set(ZRT_HAVE_CUDA 0)
set(ZRT_HAVE_NCCL 0)
if(NOT ZRT_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  include(CheckLanguage)
  check_language(CUDA)
  find_path(ZRT_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  # Only NCCL's header: the library is opened at the first NCCL call (comm/nccl/nccl_api.h), so a
  # program carries no dependency on it and the build machine need not have it.
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER AND ZRT_NCCL_INCLUDE_DIR)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) is what the project benchmarks on; override for other GPUs.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc (CUDA 12+ has one), so CMAKE_CUDA_STANDARD 20
    # would fail at generation; tell it the flag.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(ZRT_HAVE_CUDA 1)
    set(ZRT_HAVE_NCCL 1)
    if(NOT TARGET zrt_nccl_imported)
      add_library(zrt_nccl_imported INTERFACE IMPORTED GLOBAL)
      target_include_directories(zrt_nccl_imported INTERFACE ${ZRT_NCCL_INCLUDE_DIR})
    endif()
  elseif(ZRT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZRT_CUDA=ON but the CUDA Toolkit is incomplete: toolkit found="
                        "${CUDAToolkit_FOUND}, nvcc='${CMAKE_CUDA_COMPILER}', "
                        "nccl.h='${ZRT_NCCL_INCLUDE_DIR}'")
  endif()
endif()

# A static library of CUDA kernels (the .cu files given) that a ZRT library calls through a
# plain-data header: it depends only on the CUDA runtime, and is exported as zrt::EXPORT_NAME.
function(zrt_add_cuda_kernels target export_name)
  add_library(${target} STATIC ${ARGN})
  add_library(zrt::${export_name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name}
                        CUDA_RUNTIME_LIBRARY Shared POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/gen)
  target_link_libraries(${target} PUBLIC CUDA::cudart)
  zrt_target_defaults(${target})
endfunction()
