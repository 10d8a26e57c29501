#!/usr/bin/env bash
# Session 59, call 4 (~60 s): the final tree (after the CPU-only changes and the Generator's
# `auto` KV cache, f16 on a GPU as before): the GPU tests of the LLM generator, synthetic decode.
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s59b/s59b.tar.xz \
#   $B/tests/rlx_gpu_tests $B/tests/rlx_model_tests $B/bench/rlx_generate_bench
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s59b/s59b.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='*Llm*:*Gemma*' > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -8
pack
timeout 60 $R/rlx_generate_bench $G > "$L/gen.log" 2>&1
echo "gen rc=$? $(val "$L/gen.log")"
pack
