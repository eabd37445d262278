# The library's layers (docs/architecture.md): one static library per layer,
# linked downward only, each compiled against the headers of itself and of
# the layers it links, and nothing else.
#
#   reshard_layer(<name>
#     [SOURCES <src/...cc>...]        none: a header-only INTERFACE library
#     [PUBLIC_HEADERS <file>...]      paths under include/reshard/ it owns
#                                     (sdk/x.h, backends/x.h, x.h)
#     [INTERNAL_DIRS <dir>...]        directories under src/ whose *.h it owns
#     [DEPENDS <layer>...]            the layers below it that it uses
#     [PUBLIC_LIBS <target>...]       third-party, seen by callers too
#     [PRIVATE_LIBS <target>...]      third-party, its sources only
#     [BACKEND]                       registers itself (store schemes,
#                                     peer exchanges); no layer depends on it
#     [NO_INSTALL])                   built for tools and tests only
#
# defines the target reshard_<name> (alias reshard::<name>, file
# libreshard_<name>.a). Its one include root is a build-tree directory,
# layers/<name>/, holding symbolic links to exactly the headers it owns:
# reshard/<file> -> include/reshard/<file> and <dir>/<x>.h -> src/<dir>/<x>.h.
# The root is a usage requirement, so a layer sees its own headers and those
# of the layers it links (transitively) and no other: an upward or sideways
# include is "file not found" at compile time (tests/layering/).
#
# A BACKEND layer registers itself from static initialisers (URI schemes
# in backend_registry.h, peer exchanges in live_exchange/peer_exchange.h)
# and nothing calls into it by name, so the umbrella
# links it whole (WHOLE_ARCHIVE): a linker would otherwise drop it.
#
# Every header of include/reshard/ must belong to exactly one installed
# layer (checked by reshard_check_public_headers()); the installed headers
# are those, in include/reshard/ of the prefix.

set(RESHARD_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)

# Links `link` -> `target`, replacing whatever `link` was.
function(_reshard_link_header target link)
  get_filename_component(dir ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

function(reshard_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 L "NO_INSTALL;BACKEND" ""
    "SOURCES;PUBLIC_HEADERS;INTERNAL_DIRS;DEPENDS;PUBLIC_LIBS;PRIVATE_LIBS")
  set(target reshard_${name})
  set(root ${RESHARD_LAYER_ROOT}/${name})
  # Rebuilt at every configure, so a header that moved to another layer (or
  # was deleted) leaves no stale link behind.
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(header IN LISTS L_PUBLIC_HEADERS)
    set(file ${PROJECT_SOURCE_DIR}/include/reshard/${header})
    if(NOT EXISTS ${file})
      message(FATAL_ERROR "layer ${name}: no public header ${file}")
    endif()
    _reshard_link_header(${file} ${root}/reshard/${header})
  endforeach()
  foreach(dir IN LISTS L_INTERNAL_DIRS)
    # Not recursive: every layer has a folder src/<layer>/ of its own.
    file(GLOB headers CONFIGURE_DEPENDS
      ${PROJECT_SOURCE_DIR}/src/${dir}/*.h)
    foreach(file IN LISTS headers)
      get_filename_component(base ${file} NAME)
      _reshard_link_header(${file} ${root}/${dir}/${base})
    endforeach()
  endforeach()

  set(deps)
  foreach(dep IN LISTS L_DEPENDS)
    if(NOT TARGET reshard_${dep})
      message(FATAL_ERROR "layer ${name} depends on ${dep}, which is not "
        "defined yet (layers are defined bottom-up)")
    endif()
    list(APPEND deps reshard_${dep})
  endforeach()

  if(L_SOURCES)
    add_library(${target} STATIC ${L_SOURCES})
    set(scope PUBLIC)
    target_link_libraries(${target} PRIVATE ${L_PRIVATE_LIBS})
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  add_library(reshard::${name} ALIAS ${target})
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>)
  target_link_libraries(${target} ${scope} ${deps} ${L_PUBLIC_LIBS})
  target_compile_features(${target} ${scope} cxx_std_20)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})

  if(L_BACKEND)
    set_property(GLOBAL APPEND PROPERTY RESHARD_BACKEND_LAYERS ${name})
  endif()
  if(NOT L_NO_INSTALL)
    set_property(GLOBAL APPEND PROPERTY RESHARD_INSTALLED_LAYERS ${name})
    set_property(GLOBAL APPEND PROPERTY RESHARD_PUBLIC_HEADERS
      ${L_PUBLIC_HEADERS})
  elseif(L_PUBLIC_HEADERS)
    message(FATAL_ERROR "layer ${name} is not installed and cannot own "
      "public headers")
  endif()
endfunction()

# Fails the configure if a header of include/reshard/ belongs to no
# installed layer (it would be neither visible nor installed).
function(reshard_check_public_headers)
  get_property(owned GLOBAL PROPERTY RESHARD_PUBLIC_HEADERS)
  file(GLOB_RECURSE present CONFIGURE_DEPENDS RELATIVE
    ${PROJECT_SOURCE_DIR}/include/reshard
    ${PROJECT_SOURCE_DIR}/include/reshard/*.h)
  foreach(header IN LISTS present)
    list(FIND owned ${header} index)
    if(index EQUAL -1)
      message(FATAL_ERROR "include/reshard/${header} belongs to no layer: "
        "name it in PUBLIC_HEADERS of its reshard_layer() (CMakeLists.txt)")
    endif()
  endforeach()
endfunction()

# The umbrella target reshard (reshard::reshard): every installed layer.
# CMake orders the static libraries on a link line from their dependencies,
# so a consumer links them in the right order.
function(reshard_add_umbrella)
  get_property(layers GLOBAL PROPERTY RESHARD_INSTALLED_LAYERS)
  get_property(backends GLOBAL PROPERTY RESHARD_BACKEND_LAYERS)
  add_library(reshard INTERFACE)
  add_library(reshard::reshard ALIAS reshard)
  foreach(layer IN LISTS layers)
    if(layer IN_LIST backends)
      # The installed package names the imported target reshard::<layer>.
      target_link_libraries(reshard INTERFACE
        "$<BUILD_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,reshard_${layer}>>"
        "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,reshard::${layer}>>")
    else()
      target_link_libraries(reshard INTERFACE reshard_${layer})
    endif()
  endforeach()
endfunction()

# Appends the calling folder's test files `files` to global property
# `property`, failing the configure for a file that does not exist.
function(_reshard_register_test_files property)
  foreach(file IN LISTS ARGN)
    set(path ${CMAKE_CURRENT_SOURCE_DIR}/${file})
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "${CMAKE_CURRENT_LIST_FILE}: no test ${file}")
    endif()
    set_property(GLOBAL APPEND PROPERTY ${property} ${path})
  endforeach()
endfunction()

# reshard_register_tests(<file>...): the calling folder's unit tests, by
# name relative to the folder; they are compiled into reshard_tests.
function(reshard_register_tests)
  _reshard_register_test_files(RESHARD_TEST_SOURCES ${ARGN})
endfunction()

# reshard_register_gpu_tests(<file>...): tests that need a CUDA device,
# compiled into reshard_gpu_tests, whose ctest entries carry the label
# `gpu` and report skipped (GTEST_SKIP) where there is no device.
function(reshard_register_gpu_tests)
  _reshard_register_test_files(RESHARD_GPU_TEST_SOURCES ${ARGN})
endfunction()

# Fails the configure if a *_test.cc under src/ or testing/ is registered
# by no folder (it would never build or run).
function(reshard_check_registered_tests)
  get_property(registered GLOBAL PROPERTY RESHARD_TEST_SOURCES)
  get_property(gpu GLOBAL PROPERTY RESHARD_GPU_TEST_SOURCES)
  list(APPEND registered ${gpu})
  file(GLOB_RECURSE present CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/src/*_test.cc ${PROJECT_SOURCE_DIR}/testing/*_test.cc)
  foreach(file IN LISTS present)
    if(NOT file IN_LIST registered)
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
      message(FATAL_ERROR "${rel} is registered by no folder: name it in "
        "reshard_register_tests() of its folder's CMakeLists.txt")
    endif()
  endforeach()
endfunction()
