# cmake -P script: install the build at BUILD_DIR into WORK_DIR/prefix, then
# configure, build and run PROJECT_DIR (which uses find_package(shmbus)).
foreach(v CMAKE_COMMAND BUILD_DIR GENERATOR PROJECT_DIR WORK_DIR)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "install_check.cmake: ${v} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE config_files ${prefix}/*/shmbusConfig.cmake)
if(NOT config_files)
  message(FATAL_ERROR "no shmbusConfig.cmake under ${prefix}")
endif()
if(EXISTS ${prefix}/include/shmbus/layout.hpp OR EXISTS ${prefix}/include/layout.hpp)
  message(FATAL_ERROR "the private layout header was installed")
endif()

set(configure_args -S ${PROJECT_DIR} -B ${build} -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON)
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(EXAMPLE)
  list(APPEND configure_args -DSHMBUS_EXAMPLE=${EXAMPLE})
endif()
if(SANITIZE)
  # The installed library was built with sanitizers; so must its users be.
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}"
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} ${configure_args})
run(${CMAKE_COMMAND} --build ${build})

string(RANDOM LENGTH 8 ALPHABET abcdefghijklmnopqrstuvwxyz0123456789 suffix)
run(${build}/shmbus_install_consumer install-check-${suffix})
message(STATUS "${last_output}")
if(EXAMPLE)
  run(${build}/hello install-hello-${suffix})
  message(STATUS "${last_output}")
endif()
message(STATUS "install check passed")
