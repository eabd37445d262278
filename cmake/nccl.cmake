# NCCL, for the NCCL peer exchange's library backend (src/exec_nccl/,
# nccl_cuda_api.cc). Looked for only with RESHARD_CUDA: nccl.h and libnccl
# beside the CUDA toolkit (or under NCCL_ROOT). Sets
#   RESHARD_NCCL          ON where both were found
#   RESHARD_NCCL_INCLUDE_DIR, RESHARD_NCCL_LIBRARY
# Without it the exchange keeps its host emulation (api=host) and refuses
# the library with one line naming this option.
set(RESHARD_NCCL OFF)
if(RESHARD_CUDA)
  find_path(RESHARD_NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
      /usr/local/cuda
    PATH_SUFFIXES include)
  find_library(RESHARD_NCCL_LIBRARY nccl
    HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
      /usr/local/cuda
    PATH_SUFFIXES lib64 lib)
  if(RESHARD_NCCL_INCLUDE_DIR AND RESHARD_NCCL_LIBRARY)
    set(RESHARD_NCCL ON)
    message(STATUS "reshard: NCCL backend ON (${RESHARD_NCCL_LIBRARY})")
  else()
    message(STATUS "reshard: NCCL backend OFF (nccl.h or libnccl not found)")
  endif()
endif()
