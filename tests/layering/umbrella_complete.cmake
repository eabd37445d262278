# Fails when a user-facing header (include/reshard/*.h, one level: sdk/ and
# backends/ are for implementers and named uses) is missing from the
# umbrella reshard/reshard.h.
#   cmake -DSOURCE_DIR=<repo> -P umbrella_complete.cmake
file(GLOB headers RELATIVE ${SOURCE_DIR}/include/reshard
  ${SOURCE_DIR}/include/reshard/*.h)
file(READ ${SOURCE_DIR}/include/reshard/reshard.h umbrella)
set(missing)
foreach(h IN LISTS headers)
  if(h STREQUAL "reshard.h")
    continue()
  endif()
  string(FIND "${umbrella}" "#include \"reshard/${h}\"" at)
  if(at EQUAL -1)
    list(APPEND missing ${h})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "reshard/reshard.h does not include: ${missing}")
endif()
list(LENGTH headers count)
message(STATUS "reshard/reshard.h includes all ${count} other user-facing headers")
