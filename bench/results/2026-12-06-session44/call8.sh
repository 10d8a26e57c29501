#!/usr/bin/env bash
# Session 44 call 8: the final tree (8373b0e): full rlx_gpu_tests, CUDA conformance, encoders
# (two runs) and decode / prefill (two runs).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44h/s44h.tar.xz "${1:?OUT}"
suites
encoders
for r in 1 2; do timeout 60 $R/rlx_generate_bench $G > "$L/gen-$r.log" 2>&1; echo "gen $r rc=$? $(val "$L/gen-$r.log")"; done
pack
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert-2.log" 2>&1
echo "bert 2 rc=$? $(grep -v '^{' "$L/bert-2.log" | head -12 | tr '\n' '|')"
pack
