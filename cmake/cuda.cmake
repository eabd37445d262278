# RESHARD_CUDA: the CUDA runtime implementation of the device API
# (src/exec_cuda/cuda_runtime_api.cc) and the kernels (*.cu), built with
# nvcc against the toolkit's cudart. ON by default where CMake finds a CUDA
# compiler; nothing in the build needs a GPU (the machine that builds may
# have none). OFF leaves the host emulation and a library that refuses
# CUDA memory with one line naming the fragment.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(reshard_cuda_default ON)
else()
  set(reshard_cuda_default OFF)
endif()
# Not in sanitizer or fuzzer trees: their runtimes do not instrument nvcc's
# output, and the emulation is what those passes test.
if(RESHARD_SANITIZE OR RESHARD_FUZZ)
  set(reshard_cuda_default OFF)
endif()
option(RESHARD_CUDA "Build the CUDA runtime backend (needs nvcc)"
  ${reshard_cuda_default})
if(RESHARD_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "RESHARD_CUDA is ON but no CUDA compiler was found "
      "(put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  endif()
  # Ampere and Hopper, and PTX for later GPUs.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  enable_language(CUDA)
  # The kernels' sources are C++17 (CMake 3.25 knows no CUDA20 dialect for
  # nvcc 13).
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # Imported targets that name /usr/include as a system directory would
  # put it before the host compiler's own, and libstdc++'s
  # `#include_next <math.h>` would then fail under nvcc.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  message(STATUS "reshard: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
else()
  message(STATUS "reshard: CUDA backend OFF")
endif()
