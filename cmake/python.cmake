# The Python package `reshard` (python/reshard/ and the native module built
# from src/python/), laid out in ${PROJECT_BINARY_DIR}/python so that
#   PYTHONPATH=build/python /usr/bin/python3 -c "import reshard"
# works after `make`. Built against Debian's interpreter (RESHARD_PYTHON,
# default /usr/bin/python3), never another python3 first on PATH.
#
# Included before any target is defined when RESHARD_BUILD_PYTHON is on:
# the extension links the static layer libraries, which must then be
# position independent.

set(PYBIND11_FINDPYTHON ON)
set(Python_EXECUTABLE "${RESHARD_PYTHON}" CACHE FILEPATH
  "Interpreter the Python package is built for" FORCE)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
find_package(pybind11 CONFIG REQUIRED)

function(reshard_add_python_package)
  pybind11_add_module(reshard_python MODULE
    src/python/module.cc src/python/errors.cc src/python/convert.cc
    src/python/contract_py.cc src/python/placement_py.cc
    src/python/binding_py.cc src/python/plan_py.cc src/python/buffers.cc
    src/python/transfer_py.cc src/python/store_py.cc src/python/live_py.cc
    src/python/dlpack_py.cc src/python/hf_py.cc src/python/progress.cc
    src/python/engine_py.cc)
  # Public headers only (the umbrella target), plus its own directory.
  target_include_directories(reshard_python PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(reshard_python PRIVATE reshard)
  set(out ${PROJECT_BINARY_DIR}/python/reshard)
  set_target_properties(reshard_python PROPERTIES OUTPUT_NAME _reshard
    LIBRARY_OUTPUT_DIRECTORY ${out})

  # The pure-Python modules, copied beside the extension.
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS RELATIVE
    ${PROJECT_SOURCE_DIR}/python/reshard ${PROJECT_SOURCE_DIR}/python/reshard/*.py)
  set(copies)
  foreach(f ${sources})
    add_custom_command(OUTPUT ${out}/${f}
      COMMAND ${CMAKE_COMMAND} -E copy
        ${PROJECT_SOURCE_DIR}/python/reshard/${f} ${out}/${f}
      DEPENDS ${PROJECT_SOURCE_DIR}/python/reshard/${f}
      COMMENT "python/reshard/${f}")
    list(APPEND copies ${out}/${f})
  endforeach()
  add_custom_target(reshard_python_sources ALL DEPENDS ${copies})
  add_dependencies(reshard_python reshard_python_sources)

  # make install-python: into PYTHON_SITE (default: the interpreter's
  # site-packages under the install prefix, e.g.
  # /usr/local/lib/python3.11/dist-packages).
  set(PYTHON_SITE
    "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages"
    CACHE STRING "Where install-python puts the package (relative: under the prefix)")
  install(TARGETS reshard_python LIBRARY DESTINATION ${PYTHON_SITE}/reshard
    COMPONENT python EXCLUDE_FROM_ALL)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/reshard
    DESTINATION ${PYTHON_SITE} COMPONENT python EXCLUDE_FROM_ALL
    FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endfunction()
