#!/usr/bin/env bash
# Prepared for the next session (session 45 found no machine for it): the final tree's full GPU
# suite and conformance, then branch gemm-ln-producer-warp (W, 7acb209) against main (M):
# GemmLnSm90 tests and rlx_gemm_bench --only ln; then the encoders. Its archive (build/carry-s45e,
# not in git) is rebuilt by: carry_binaries.sh with main's rlx_gpu_tests, rlx_op_tests, rlx_bert_bench,
# rlx_gemm_bench_M and the branch's rlx_gemm_bench_W, rlx_gpu_tests_W.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s45e/s45e.tar.xz "${1:?OUT}"
suites
timeout 60 $R/rlx_gpu_tests_W --gtest_filter='GemmLnSm90*:FusionGpu*' > "$L/tests-W.log" 2>&1
echo "tests W rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-W.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-W.log" | head -5 | tr '\n' ' ')"
pack
bench_variants rlx_gemm_bench "--only ln" 'minilm (attn-out|ffn2) +[0-9]+x' M W
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -E 'cuda-graphs' "$L/bert.log" | sed 's/  */ /g' | tr '\n' '|')"
pack
