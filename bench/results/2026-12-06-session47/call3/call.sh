#!/usr/bin/env bash
# Session 47 call 3: the fused QKV projection + attention with packs of short sequences.
# Tests, then a shape sweep (fused with the CTA minimum at 1 against unfused), 128-key tiles at D = 32
# against 64 (rlx_bert_bench_kt64), then the suites.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s47c/s47c.tar.xz "${1:?OUT}"
timeout 200 $R/rlx_gpu_tests --gtest_filter='QkvAttention*:BertGpu*:AttentionGpu*:GemmLn*' > "$L/tests-focus.log" 2>&1
echo "focus tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|want|bad values|Which is' "$L/tests-focus.log" | head -30
pack
sweep() {  # sweep MODEL SHAPE...
  local m=$1 s f
  shift
  for s in "$@"; do
    RLX_CUDA_QKV_ATTENTION_MIN_CTAS=1 timeout 60 $R/rlx_bert_bench --graphs-only --model $m --shape $s > "$L/sweep-$m-$s-f1.log" 2>&1
    RLX_CUDA_FUSE_QKV_ATTENTION=0 timeout 60 $R/rlx_bert_bench --graphs-only --model $m --shape $s > "$L/sweep-$m-$s-f0.log" 2>&1
    echo "$m $s fused $(grep cuda-graphs "$L/sweep-$m-$s-f1.log" | grep -oE '[0-9.]+ ms' | head -1) unfused $(grep cuda-graphs "$L/sweep-$m-$s-f0.log" | grep -oE '[0-9.]+ ms' | head -1)"
  done
  pack
}
sweep minilm-l6 256x128 256x64 256x32 256x16 32x128 8x128 1x128 64x32 1x16
sweep bert-base 256x128 256x32 8x128
for round in 1 2; do
  for v in rlx_bert_bench rlx_bert_bench_kt64; do
    timeout 60 $R/$v --graphs-only --model minilm-l6 --shape 256x128 > "$L/kt-$v-$round.log" 2>&1
    echo "$v round $round $(grep cuda-graphs "$L/kt-$v-$round.log" | grep -oE '[0-9.]+ ms' | head -1)"
  done
done
for round in 1; do
  for f in 1 0; do
    RLX_CUDA_FUSE_QKV_ATTENTION=$f timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert-f$f-$round.log" 2>&1
    echo "bert fuse=$f round $round rc=$? $(grep -E 'cuda-graphs' "$L/bert-f$f-$round.log" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
suites
