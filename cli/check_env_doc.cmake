# cmake -DRLX=<rlx> -DDOC=<docs/env.md> -P check_env_doc.cmake
# docs/env.md is generated from the env table; fail when it is out of date.
execute_process(COMMAND ${RLX} --help-env --markdown RESULT_VARIABLE rc OUTPUT_VARIABLE generated)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "rlx --help-env --markdown failed (${rc})")
endif()
file(READ ${DOC} current)
if(NOT generated STREQUAL current)
  message(FATAL_ERROR "${DOC} is out of date with rlx/core/env.cpp; run scripts/gen_env_doc.sh.\n"
                      "Generated:\n${generated}")
endif()
