# rlx_target_defaults(target): include path from the repo root, warnings, sanitizers.
add_library(rlx_options INTERFACE)
# Not a compile feature: CMake 3.25 would also demand "CUDA20" of nvcc, which it cannot name.
target_compile_options(rlx_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-std=c++20>)
# Warnings and sanitizers apply to rlx's own build only, not to projects that
# link the installed package (BUILD_INTERFACE).
target_compile_options(rlx_options INTERFACE
  $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>>
  $<BUILD_INTERFACE:$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${RLX_WERROR}>>:-Werror>>
  $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda -Xcompiler=-Wall>>
  $<BUILD_INTERFACE:$<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${RLX_WERROR}>>:-Werror=all-warnings>>)
if(RLX_SANITIZE)
  target_compile_options(rlx_options INTERFACE
    $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>>)
  target_link_options(rlx_options INTERFACE $<BUILD_INTERFACE:-fsanitize=address,undefined>)
endif()
install(TARGETS rlx_options EXPORT rlxTargets)

function(rlx_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(rlx::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:include>)
  target_link_libraries(${name} PUBLIC rlx_options ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${name})
  install(TARGETS ${name} EXPORT rlxTargets ARCHIVE DESTINATION lib)
endfunction()
