#!/usr/bin/env bash
# Session 47: the fused QKV projection + attention kernel (working tree), tests then
# MiniLM/BERT end to end with RLX_CUDA_FUSE_QKV_ATTENTION on and off, then the suites.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s47b/s47b.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='QkvAttention*' > "$L/tests-qkv.log" 2>&1
echo "qkv tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-qkv.log" | tr '\n' ' ')"
grep -E 'FAILED|Failure|want|bad values|Which is|rows_close|row [0-9]' "$L/tests-qkv.log" | head -30
pack
for round in 1 2; do
  for f in 1 0; do
    RLX_CUDA_FUSE_QKV_ATTENTION=$f timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert-f$f-$round.log" 2>&1
    echo "bert fuse=$f round $round rc=$? $(grep -E 'cuda-graphs' "$L/bert-f$f-$round.log" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 --shape 256x128 > "$L/report-minilm.log" 2>&1
grep -iE 'qkv|attention|total' "$L/report-minilm.log" | head -12
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench --graphs-only --model bert-base --shape 256x128 > "$L/report-bert.log" 2>&1
grep -iE 'qkv|attention' "$L/report-bert.log" | head -6
pack
suites
