# Fails when a file under src/ outside src/live_ucx/ includes a UCX header
# (ucp/, ucs/, uct/) or one of live_ucx/: the live session and the other
# exchanges know UCX only through the peer-exchange interface. The
# identifiers, and include/, tools/ and python/reshard/ too, are checked by
# scripts/ucx_confined.py (ctest layering_ucx_identifiers).
#   cmake -DSOURCE_DIR=<repo> -P ucx_confined.cmake
file(GLOB_RECURSE files ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc)
set(offenders)
foreach(f IN LISTS files)
  if(f MATCHES "/src/live_ucx/")
    continue()
  endif()
  file(STRINGS ${f} hits
    REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](ucp/|ucs/|uct/|live_ucx/)")
  if(hits)
    list(APPEND offenders "${f}: ${hits}")
  endif()
endforeach()
list(LENGTH files count)
if(count LESS 100)
  message(FATAL_ERROR "found only ${count} files under ${SOURCE_DIR}/src")
endif()
if(offenders)
  string(REPLACE ";" "\n" text "${offenders}")
  message(FATAL_ERROR "UCX headers outside src/live_ucx/:\n${text}")
endif()
message(STATUS "${count} files under src/: UCX confined to src/live_ucx/")
