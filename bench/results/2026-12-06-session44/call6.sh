#!/usr/bin/env bash
# Session 44 call 6: the final tree's suites and figures (full rlx_gpu_tests, CUDA conformance, the
# encoders beside PyTorch eager and torch.compile, decode and prefill, the GEMV rows).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44f/s44f.tar.xz "${1:?OUT}"
suites
encoders
for r in 1 2; do timeout 60 $R/rlx_generate_bench $G > "$L/gen-$r.log" 2>&1; echo "gen $r rc=$? $(val "$L/gen-$r.log")"; done
pack
timeout 90 $R/rlx_quant_bench --only gemv --types q4_0,q5_0,q8_0,q4_k,q5_k,q6_k,iq4_xs > "$L/quant.log" 2>&1
echo "quant rc=$?"; grep -E '^(gemv-stream|read-only|gemv-staged 262144|this GPU)' "$L/quant.log" | grep -E 'graph|262144|GPU' | grep -E '4096x4096|262144|GPU' | sed 's/  */ /g'
pack
timeout 150 python3 bench/bert_torch.py --compile > "$L/torch-bert.log" 2>&1
echo "torch rc=$? $(grep -v '^{' "$L/torch-bert.log" | tail -10 | tr '\n' '|')"
pack
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert-2.log" 2>&1
echo "bert 2 rc=$? $(grep -v '^{' "$L/bert-2.log" | head -12 | tr '\n' '|')"
pack
