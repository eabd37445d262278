# Sanitizer and fuzzer builds (used by `make check`, see docs/reliability.md).
#
#   RESHARD_SANITIZE  empty (default), "address,undefined" or "thread".
#                     Every target of the tree is compiled and linked with
#                     the sanitizer; a report aborts the process (no
#                     recovery), so a test that trips one fails.
#   RESHARD_FUZZ      ON: the library is built with libFuzzer's coverage
#                     instrumentation (-fsanitize=fuzzer-no-link) and the
#                     targets in fuzz/ are added. Needs clang.
#
# This file is included before any target is defined, so the flags apply to
# every target of the tree.

set(RESHARD_SANITIZE "" CACHE STRING
  "Sanitizers for every target: empty, address,undefined or thread")
option(RESHARD_FUZZ "Build the libFuzzer targets in fuzz/ (clang)" OFF)

if(RESHARD_SANITIZE)
  if(NOT RESHARD_SANITIZE MATCHES "^(address,undefined|address|undefined|thread)$")
    message(FATAL_ERROR "RESHARD_SANITIZE=${RESHARD_SANITIZE}: expected "
      "address,undefined or thread")
  endif()
  add_compile_options(-fsanitize=${RESHARD_SANITIZE} -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${RESHARD_SANITIZE} -fno-sanitize-recover=all)
endif()

if(RESHARD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "RESHARD_FUZZ needs clang (libFuzzer); configure with "
      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  # Coverage instrumentation only; the fuzz targets link libFuzzer itself.
  # Other executables of the tree (the unit tests) link without it: the
  # sanitizer runtime defines the coverage callbacks.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
