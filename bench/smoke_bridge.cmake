# bench.smoke.bridge: runs shmbus-bench's bridge and tcp transports briefly
# (full speed, fixed rate and a catch-up of a 20,000-message backlog, one
# consumer, 128 B) and checks what came out:
# every row present, ok, with nonzero throughput and no sequence error.
# Not a performance check: no bound on any number.
#   cmake -DBENCH=path/to/shmbus-bench -DJSON=out.json -P smoke_bridge.cmake
execute_process(
  COMMAND ${BENCH} --quick --runs 1 --transports bridge,tcp --consumers 1 --sizes 128 --modes full,rate,catchup
          --rate-count 2000 --timeout 30 --json ${JSON}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "shmbus-bench exited with ${rc}: ${err}")
endif()
file(READ ${JSON} doc)
string(JSON n LENGTH "${doc}" results)
if(NOT n EQUAL 6)
  message(FATAL_ERROR "expected 6 rows (bridge and tcp; full, rate and catchup), got ${n}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON transport GET "${doc}" results ${i} transport)
  string(JSON mode GET "${doc}" results ${i} mode)
  string(JSON status GET "${doc}" results ${i} status)
  string(JSON mps GET "${doc}" results ${i} median per_consumer_msgs_per_s)
  string(JSON mbps GET "${doc}" results ${i} median per_consumer_mb_per_s)
  if(NOT status STREQUAL "ok" OR NOT mps GREATER 0 OR NOT mbps GREATER 0)
    message(FATAL_ERROR "${transport} ${mode}: status ${status}, ${mps} msgs/s")
  endif()
  message(STATUS "${transport} ${mode}: ${mps} msgs/s per consumer")
endforeach()
string(JSON ratio GET "${doc}" results 0 vs_tcp msgs_per_s)
message(STATUS "bridge ÷ tcp at full speed: ${ratio}")
string(JSON mode GET "${doc}" results 4 mode)
string(JSON ratio GET "${doc}" results 4 vs_tcp msgs_per_s)
if(NOT mode STREQUAL "catchup" OR NOT ratio GREATER 0)
  message(FATAL_ERROR "no bridge ÷ tcp ratio for the catch-up (row 4: ${mode})")
endif()
message(STATUS "bridge ÷ tcp catching up a backlog: ${ratio}")
