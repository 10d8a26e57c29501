#!/usr/bin/env bash
# Session 44 call 7: the attention prefill's row length, mask flag and Q requested together at the
# start of an item (P) against main (M): AttentionGpu with P, then the attention bench's
# embedding rows and both encoders, two rounds interleaved.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44g/s44g.tar.xz "${1:?OUT}"
timeout 100 $R/rlx_gpu_tests_P --gtest_filter='AttentionGpu*:GemmLnSm90*:FusionGpu*' > "$L/tests-P.log" 2>&1
echo "tests P rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-P.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-P.log" | head -5 | tr '\n' ' ')"
pack
bench_variants rlx_attention_bench "" '^embed f16' M P
bench_variants rlx_bert_bench "--graphs-only" 'cuda-graphs' M P
