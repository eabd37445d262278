# ctest install_and_consume: installs the build tree into WORK_DIR/prefix,
# then builds examples/consumer against that prefix twice, once with
# find_package(reshard CONFIG) and once with the flags of
# `pkg-config --cflags --libs reshard`, and checks that both print the
# placement_id of PLACEMENT (EXPECTED_ID) and the registered store schemes.
#
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DCXX=...
#     -DGENERATOR=... -DPLACEMENT=... -DEXPECTED_ID=... -P consumer_test.cmake

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${rc}): ${command}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_id program how)
  run(${program} ${PLACEMENT})
  string(STRIP "${out}" id)
  # The placement's id, then the schemes the backends registered.
  if(NOT id STREQUAL "${EXPECTED_ID} fs redis unix")
    message(FATAL_ERROR "${how}: printed \"${id}\", expected "
      "\"${EXPECTED_ID} fs redis unix\"")
  endif()
  message(STATUS "${how}: ${id}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The installed headers are the public ones: no self-test, no internals.
file(GLOB_RECURSE installed RELATIVE ${prefix}/include ${prefix}/include/*)
list(SORT installed)
foreach(header IN LISTS installed)
  if(NOT header MATCHES "^reshard/((sdk|backends)/)?[a-z_]+\\.h$" OR header STREQUAL
     "reshard/selftest.h")
    message(FATAL_ERROR "installed a non-public header: ${header}")
  endif()
endforeach()
list(LENGTH installed count)
message(STATUS "installed ${count} headers under include/reshard/")

# find_package(reshard CONFIG).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer
  -B ${WORK_DIR}/consumer -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
  -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
expect_id(${WORK_DIR}/consumer/placement_id "find_package(reshard)")

# pkg-config --cflags --libs reshard.
file(GLOB pc_dirs ${prefix}/lib*/pkgconfig ${prefix}/lib/*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "${pc_dirs}")
run(pkg-config --cflags --libs reshard)
string(STRIP "${out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} -std=c++20 ${SOURCE_DIR}/examples/consumer/main.cc ${flags}
  -o ${WORK_DIR}/placement_id_pc)
expect_id(${WORK_DIR}/placement_id_pc "pkg-config reshard")
