# Fails when a file under src/live/ outside src/live/ucx/ includes a UCX
# header (ucp/, ucs/, uct/) or one of live/ucx/: the live session and the
# other exchanges know UCX only through the peer-exchange interface.
#   cmake -DSOURCE_DIR=<repo> -P ucx_confined.cmake
file(GLOB_RECURSE files ${SOURCE_DIR}/src/live/*.h ${SOURCE_DIR}/src/live/*.cc)
set(offenders)
foreach(f IN LISTS files)
  if(f MATCHES "/src/live/ucx/")
    continue()
  endif()
  file(STRINGS ${f} hits
    REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](ucp/|ucs/|uct/|live/ucx/)")
  if(hits)
    list(APPEND offenders "${f}: ${hits}")
  endif()
endforeach()
list(LENGTH files count)
if(count LESS 10)
  message(FATAL_ERROR "found only ${count} files under ${SOURCE_DIR}/src/live")
endif()
if(offenders)
  string(REPLACE ";" "\n" text "${offenders}")
  message(FATAL_ERROR "UCX headers outside src/live/ucx/:\n${text}")
endif()
message(STATUS "${count} files under src/live/: UCX confined to src/live/ucx/")
