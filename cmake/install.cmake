# `cmake --install <build> --prefix P` (or `make install PREFIX=P`):
#
#   P/include/reshard/**.h            the public headers of every layer
#                                     (sdk/: for implementers; backends/)
#   P/lib/libreshard_<layer>.a        one static library per installed layer
#   P/lib/cmake/reshard/              find_package(reshard CONFIG): imported
#                                     targets reshard::<layer> and the
#                                     umbrella reshard::reshard
#   P/lib/pkgconfig/reshard.pc        pkg-config --cflags --libs reshard
#
# The self-test layer, the CLI, tests and benchmarks are not installed.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_layers GLOBAL PROPERTY RESHARD_INSTALLED_LAYERS)
get_property(_headers GLOBAL PROPERTY RESHARD_PUBLIC_HEADERS)

set(_targets reshard)
foreach(layer IN LISTS _layers)
  list(APPEND _targets reshard_${layer})
endforeach()
install(TARGETS ${_targets} EXPORT reshardTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Each header keeps its folder (reshard/sdk/, reshard/backends/).
foreach(header IN LISTS _headers)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/include/reshard/${header}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/reshard/${dir})
endforeach()

set(RESHARD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/reshard)
install(EXPORT reshardTargets NAMESPACE reshard::
  DESTINATION ${RESHARD_CMAKE_DIR})
configure_package_config_file(cmake/reshardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/reshardConfig.cmake
  INSTALL_DESTINATION ${RESHARD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/reshardConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/reshardConfig.cmake
  ${PROJECT_BINARY_DIR}/reshardConfigVersion.cmake
  DESTINATION ${RESHARD_CMAKE_DIR})

# pkg-config: the libraries of the layers from the top down (a layer before
# the layers it links; layers are defined bottom-up, header-only ones have
# no file), then the Debian packages they link. Static libraries only, so
# every dependency is in Requires, not Requires.private. The prefix is
# found from the .pc file's own place, so the tree can move.
set(RESHARD_PC_LIBS)
get_property(_backends GLOBAL PROPERTY RESHARD_BACKEND_LAYERS)
foreach(layer IN LISTS _layers)
  get_target_property(type reshard_${layer} TYPE)
  if(layer IN_LIST _backends)
    # Linked whole: it registers its schemes from static initialisers.
    list(PREPEND RESHARD_PC_LIBS
      "-Wl,--whole-archive -lreshard_${layer} -Wl,--no-whole-archive")
  elseif(type STREQUAL "STATIC_LIBRARY")
    list(PREPEND RESHARD_PC_LIBS -lreshard_${layer})
  endif()
endforeach()
if(RESHARD_CUDA)
  # The toolkit ships no pkg-config file for cudart: its library directly.
  list(APPEND RESHARD_PC_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
if(RESHARD_NCCL)
  # The NCCL exchange's library (cmake/nccl.cmake), by its path.
  list(APPEND RESHARD_PC_LIBS "${RESHARD_NCCL_LIBRARY}")
endif()
list(JOIN RESHARD_PC_LIBS " " RESHARD_PC_LIBS)
file(RELATIVE_PATH RESHARD_PC_PREFIX
  /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" RESHARD_PC_PREFIX "${RESHARD_PC_PREFIX}")
configure_file(cmake/reshard.pc.in ${PROJECT_BINARY_DIR}/reshard.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/reshard.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
