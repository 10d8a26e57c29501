#!/usr/bin/env bash
# Session 46 call 2: branch pp-deferred-epilogue (D): the ping-pong GEMM runs each tile's
# activation + staging beside the consumer's next main loop. GemmSm90/Fusion/Bert tests first,
# then gemm bench (sm90 rows) and encoders D vs main (M), then the full suites.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s46a/s46a.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:FusionGpu*:BertGpu*:GemmLn*' > "$L/tests-focus.log" 2>&1
echo "focus rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-focus.log" | head -5 | tr '\n' ' ')"
pack
bench_variants rlx_gemm_bench "--only sm90" 'ping-pong' M D
bench_variants rlx_bert_bench "--graphs-only" 'cuda-graphs' M D
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench_D --graphs-only --model minilm-l6 --shape 256x128 > "$L/dispatch-D.log" 2>&1
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench_M --graphs-only --model minilm-l6 --shape 256x128 > "$L/dispatch-M.log" 2>&1
pack
suites
