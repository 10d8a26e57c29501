#!/usr/bin/env bash
# Session 45 call 3: the final tree (6c23f63; library code as e20aa16): full GPU suite and CUDA op
# conformance, then branch gemm-ln-producer-warp (W, 7acb209) against main (M): GemmLnSm90 tests
# and rlx_gemm_bench --only ln; then the encoders (main).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s45e/s45e.tar.xz "${1:?OUT}"
suites
timeout 60 $R/rlx_gpu_tests_W --gtest_filter='GemmLnSm90*:FusionGpu*' > "$L/tests-W.log" 2>&1
echo "tests W rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-W.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-W.log" | head -5 | tr '\n' ' ')"
pack
bench_variants rlx_gemm_bench "--only ln" 'minilm (attn-out|ffn2) +[0-9]+x' M W
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -E 'cuda-graphs' "$L/bert.log" | sed 's/  */ /g' | tr '\n' '|')"
pack
