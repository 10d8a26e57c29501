# cmake -DRLX=<rlx> -DARGS=<a|b|c> -DRC=<expected exit code> -DREGEX=<regex> [-DSTDIN=<file>] -P run_and_check.cmake
# Runs rlx with ARGS (separated by "|") and, when STDIN is given, that file as
# its standard input; fails unless the exit code is RC and stdout+stderr match
# REGEX.
string(REPLACE "|" ";" ARGS "${ARGS}")
if(DEFINED STDIN AND NOT STDIN STREQUAL "")
  execute_process(COMMAND ${RLX} ${ARGS} INPUT_FILE ${STDIN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
else()
  execute_process(COMMAND ${RLX} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
set(all "${out}${err}")
message("exit code ${rc}\n${all}")
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "rlx ${ARGS}: exit code ${rc}, expected ${RC}")
endif()
if(NOT REGEX STREQUAL "" AND NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "rlx ${ARGS}: output does not match '${REGEX}'")
endif()
