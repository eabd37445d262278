# The NCCL M2N backend's plugin, libreshard_m2n.so (src/exec_m2n/
# m2n_plugin.cc): ncclReshard through NVIDIA's nccl-extensions wheel
# (nccl/m2n/include/nccl_m2n.h, nccl/m2n/lib/cu<N>/libnccl_m2n.so) and the
# NCCL headers and library of the nvidia-nccl-cu<N> wheel (nccl_m2n.h needs
# NCCL 2.30.5 or newer; the toolkit's may be older). Built where both are
# found under RESHARD_M2N_ROOT (a venv, or a site-packages folder; `make
# m2n-venv` makes build/m2n-venv) and RESHARD_CUDA is on; otherwise not
# built, and M2nBackend refuses in one line. The paths are looked up at
# every configure (nothing cached), so a venv made or removed later is seen
# by the next configure. The plugin is loaded on first use (dlopen), never
# linked into reshard: libnccl_m2n.so needs the driver's libcuda.so.1,
# which a machine without a GPU lacks.
set(RESHARD_M2N_ROOT "${PROJECT_BINARY_DIR}/m2n-venv" CACHE PATH
  "A venv or site-packages holding nccl-extensions and nvidia-nccl-cu<N>")
set(RESHARD_M2N OFF)
set(reshard_m2n_why "")
if(NOT RESHARD_CUDA)
  set(reshard_m2n_why "RESHARD_CUDA is OFF")
else()
  file(GLOB reshard_m2n_sites
    "${RESHARD_M2N_ROOT}/lib/python3*/site-packages")
  list(APPEND reshard_m2n_sites "${RESHARD_M2N_ROOT}")
  set(reshard_m2n_cu "cu${CUDAToolkit_VERSION_MAJOR}")
  foreach(site IN LISTS reshard_m2n_sites)
    if(EXISTS "${site}/nccl/m2n/include/nccl_m2n.h"
        AND EXISTS "${site}/nccl/m2n/lib/${reshard_m2n_cu}/libnccl_m2n.so"
        AND EXISTS "${site}/nvidia/nccl/include/nccl.h"
        AND EXISTS "${site}/nvidia/nccl/lib/libnccl.so.2")
      set(RESHARD_M2N ON)
      set(reshard_m2n_site "${site}")
      break()
    endif()
  endforeach()
  if(NOT RESHARD_M2N)
    set(reshard_m2n_why "no nccl-extensions and nvidia-nccl-${reshard_m2n_cu} under RESHARD_M2N_ROOT=${RESHARD_M2N_ROOT} (make m2n-venv)")
  endif()
endif()

if(RESHARD_M2N)
  message(STATUS "reshard: NCCL M2N backend ON (${reshard_m2n_site})")
  add_library(reshard_m2n_plugin MODULE src/exec_m2n/m2n_plugin.cc)
  set_target_properties(reshard_m2n_plugin PROPERTIES OUTPUT_NAME reshard_m2n
    CXX_VISIBILITY_PRESET hidden)
  # The wheel's NCCL headers as -I, ahead of the toolkit's (a system
  # directory of CUDA::cudart) and its older nccl.h.
  target_include_directories(reshard_m2n_plugin PRIVATE
    "${reshard_m2n_site}/nvidia/nccl/include"
    "${reshard_m2n_site}/nccl/m2n/include"
    "$<TARGET_PROPERTY:reshard_exec_m2n,INTERFACE_INCLUDE_DIRECTORIES>")
  # Every symbol resolved at link time, the M2N library's own included
  # (its driver calls against the toolkit's stub libcuda.so).
  target_link_libraries(reshard_m2n_plugin PRIVATE
    "${reshard_m2n_site}/nccl/m2n/lib/${reshard_m2n_cu}/libnccl_m2n.so"
    "${reshard_m2n_site}/nvidia/nccl/lib/libnccl.so.2"
    CUDA::cudart CUDA::cuda_driver
    "-Wl,-z,defs" "-Wl,--no-allow-shlib-undefined")
  add_dependencies(reshard_exec_m2n reshard_m2n_plugin)
  target_compile_definitions(reshard_exec_m2n PRIVATE
    "RESHARD_M2N_PLUGIN=\"$<TARGET_FILE:reshard_m2n_plugin>\"")
else()
  message(STATUS "reshard: NCCL M2N backend OFF (${reshard_m2n_why})")
endif()
