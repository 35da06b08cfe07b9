# Every path the README and docs/ name exists: source paths in the source
# tree, and build/... (or build-bench/..., scripts/bench.sh's build directory,
# laid out the same way) in this build once it is built, for the parts it builds.
file(GLOB docs "${SOURCE_DIR}/docs/*.md")
# The Python module is left out of sanitizer builds (SHMBUS_BUILD_PYTHON=OFF).
set(python_built ON)
if(EXISTS "${BUILD_DIR}/CMakeCache.txt")
  file(STRINGS "${BUILD_DIR}/CMakeCache.txt" python_opt REGEX "^SHMBUS_BUILD_PYTHON:BOOL=")
  if(python_opt MATCHES "=(OFF|FALSE|0)$")
    set(python_built OFF)
  endif()
endif()
set(missing "")
foreach(doc "${SOURCE_DIR}/README.md" ${docs})
  file(READ "${doc}" text)
  # Brackets and semicolons would break CMake's lists.
  string(REGEX REPLACE "[][;]" " " text "${text}")
  string(REGEX MATCHALL
    "(^|[^A-Za-z0-9_./-])(scripts|docs|tests|tools|libshmbus|bench|examples|producer|consumer|inspector|systemd|build|build-bench)/[A-Za-z0-9_./*-]+"
    hits "${text}")
  foreach(hit IN LISTS hits)
    string(REGEX REPLACE "^[^A-Za-z]" "" path "${hit}")
    string(REGEX REPLACE "[.]$" "" path "${path}")
    if(path MATCHES "^build(-bench)?/(.*)$")
      set(rel "${CMAKE_MATCH_2}")
      if(rel MATCHES "shmbus-micro$" AND NOT MICRO_BUILT)
        continue()  # built only with Google Benchmark
      endif()
      # A part this build leaves out (e.g. -DSHMBUS_BUILD_BENCH=OFF in the
      # sanitizer builds) has no directory here: nothing of it to check.
      string(REGEX REPLACE "/.*$" "" part "${rel}")
      if(part STREQUAL "python" AND NOT python_built)
        continue()
      endif()
      if(NOT IS_DIRECTORY "${BUILD_DIR}/${part}")
        continue()
      endif()
      set(full "${BUILD_DIR}/${rel}")
    else()
      set(full "${SOURCE_DIR}/${path}")
    endif()
    file(GLOB found "${full}")
    if(NOT EXISTS "${full}" AND NOT found)
      file(RELATIVE_PATH where "${SOURCE_DIR}" "${doc}")
      list(APPEND missing "${where}: ${path}")
    endif()
  endforeach()
endforeach()
if(missing)
  list(JOIN missing "\n  " lines)
  message(FATAL_ERROR "paths named in the docs that do not exist:\n  ${lines}")
endif()
message(STATUS "every path the docs name exists")
