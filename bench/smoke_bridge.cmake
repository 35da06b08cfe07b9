# bench.smoke.bridge: runs shmbus-bench's bridge and tcp transports briefly
# (full speed and fixed rate, one consumer, 128 B) and checks what came out:
# every row present, ok, with nonzero throughput and no sequence error.
# Not a performance check: no bound on any number.
#   cmake -DBENCH=path/to/shmbus-bench -DJSON=out.json -P smoke_bridge.cmake
execute_process(
  COMMAND ${BENCH} --quick --runs 1 --transports bridge,tcp --consumers 1 --sizes 128 --modes full,rate
          --rate-count 2000 --timeout 30 --json ${JSON}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "shmbus-bench exited with ${rc}: ${err}")
endif()
file(READ ${JSON} doc)
string(JSON n LENGTH "${doc}" results)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "expected 4 rows (bridge and tcp, full and rate), got ${n}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON transport GET "${doc}" results ${i} transport)
  string(JSON mode GET "${doc}" results ${i} mode)
  string(JSON status GET "${doc}" results ${i} status)
  string(JSON mps GET "${doc}" results ${i} median per_consumer_msgs_per_s)
  if(NOT status STREQUAL "ok" OR NOT mps GREATER 0)
    message(FATAL_ERROR "${transport} ${mode}: status ${status}, ${mps} msgs/s")
  endif()
  message(STATUS "${transport} ${mode}: ${mps} msgs/s per consumer")
endforeach()
string(JSON ratio GET "${doc}" results 0 vs_tcp msgs_per_s)
message(STATUS "bridge ÷ tcp at full speed: ${ratio}")
