# The Python the tests and the module use: Debian's /usr/bin/python3 when it
# exists (its packages -- pytest, pybind11, prometheus_client -- install
# there), even when another python3 (pyenv, a virtualenv) comes first in PATH.
# Override with -DSHMBUS_PYTHON=/path/to/python3.
if(NOT SHMBUS_PYTHON)
  if(EXISTS /usr/bin/python3)
    set(SHMBUS_PYTHON /usr/bin/python3 CACHE FILEPATH "python3 for the module and the Python tests")
  else()
    find_program(SHMBUS_PYTHON python3)
  endif()
endif()
if(SHMBUS_PYTHON AND NOT DEFINED SHMBUS_PYTEST_OK)
  execute_process(COMMAND ${SHMBUS_PYTHON} -c "import pytest"
    RESULT_VARIABLE pytest_rc OUTPUT_QUIET ERROR_QUIET)
  if(pytest_rc EQUAL 0)
    set(SHMBUS_PYTEST_OK ON CACHE INTERNAL "")
  else()
    set(SHMBUS_PYTEST_OK OFF CACHE INTERNAL "")
  endif()
endif()
