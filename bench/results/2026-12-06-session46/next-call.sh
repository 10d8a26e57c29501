#!/usr/bin/env bash
# Prepared in session 46 (not run): branch pp-activation-helper-warps (H, 45466e7) against main (M):
# focused tests, gemm bench (sm90 rows) and encoders, then H's full suite and conformance.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s47a/s47a.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:FusionGpu*:BertGpu*:GemmLn*' > "$L/tests-focus.log" 2>&1
echo "focus rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-focus.log" | head -5 | tr '\n' ' ')"
pack
bench_variants rlx_gemm_bench "--only sm90" 'ping-pong ' M H
bench_variants rlx_bert_bench "--graphs-only" 'cuda-graphs' M H
suites
