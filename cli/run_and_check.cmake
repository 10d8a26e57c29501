# cmake -DRLX=<rlx> -DARGS=<a|b|c> -DRC=<expected exit code> -DREGEX=<regex> -P run_and_check.cmake
# Runs rlx with ARGS (separated by "|"); fails unless the exit code is RC and
# stdout+stderr match REGEX.
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND ${RLX} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
message("exit code ${rc}\n${all}")
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "rlx ${ARGS}: exit code ${rc}, expected ${RC}")
endif()
if(NOT REGEX STREQUAL "" AND NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "rlx ${ARGS}: output does not match '${REGEX}'")
endif()
