# NCCL, for the NCCL peer exchange's library backend (src/exec_nccl/,
# nccl_cuda_api.cc). Looked for only with RESHARD_CUDA: nccl.h and libnccl
# beside the CUDA toolkit (or under NCCL_ROOT). Sets
#   RESHARD_NCCL          ON where both were found
#   RESHARD_NCCL_INCLUDE_DIR, RESHARD_NCCL_LIBRARY
# Without it the exchange keeps its host emulation (api=host) and refuses
# the library with one line naming this option.
#
# Where RESHARD_M2N_ROOT (cmake/m2n.cmake) holds the nvidia-nccl wheel, its
# NCCL comes first: a process has one libnccl.so.2, whichever loads first,
# and NCCL M2N needs 2.30.5 or newer, which the toolkit's may not be. The
# search runs at every configure (nothing cached), so a venv made or
# removed later is seen.
set(RESHARD_M2N_ROOT "${PROJECT_BINARY_DIR}/m2n-venv" CACHE PATH
  "A venv or site-packages holding nccl-extensions and nvidia-nccl-cu<N>")
set(RESHARD_NCCL OFF)
if(RESHARD_CUDA)
  file(GLOB reshard_nccl_wheel
    "${RESHARD_M2N_ROOT}/lib/python3*/site-packages/nvidia/nccl"
    "${RESHARD_M2N_ROOT}/nvidia/nccl")
  unset(RESHARD_NCCL_INCLUDE_DIR CACHE)
  unset(RESHARD_NCCL_LIBRARY CACHE)
  find_path(RESHARD_NCCL_INCLUDE_DIR nccl.h NO_CACHE
    HINTS ${reshard_nccl_wheel} ${NCCL_ROOT} ENV NCCL_ROOT
      ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda
    PATH_SUFFIXES include)
  # The wheel ships libnccl.so.2 without the unversioned link.
  find_library(RESHARD_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR NO_CACHE
    HINTS ${reshard_nccl_wheel} ${NCCL_ROOT} ENV NCCL_ROOT
      ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda
    PATH_SUFFIXES lib64 lib)
  if(RESHARD_NCCL_INCLUDE_DIR AND RESHARD_NCCL_LIBRARY)
    set(RESHARD_NCCL ON)
    message(STATUS "reshard: NCCL backend ON (${RESHARD_NCCL_LIBRARY})")
  else()
    message(STATUS "reshard: NCCL backend OFF (nccl.h or libnccl not found)")
  endif()
endif()
