#!/usr/bin/env bash
# Prepared in session 47 (not run): branch qkv-attention-pingpong (9992173), the fused QKV projection +
# attention's persistent ping-pong form at D = 32 behind RLX_CUDA_QKV_ATTENTION_PP=1, against the two-CTA
# form (PP=0, main's kernel; SASS identical). Archive: build/carry-s48a/s48a.tar.xz, made on the branch by
#   ninja -C build/sm90 rlx_gpu_tests rlx_op_tests rlx_bert_bench && scripts/carry_binaries.sh \
#     build/carry-s48a/s48a.tar.xz build/sm90/tests/rlx_gpu_tests build/sm90/tests/rlx_op_tests \
#     build/sm90/bench/rlx_bert_bench
# Run: bash bench/results/2026-12-06-session47/next-call.sh "$OUT" with carry ["build/carry-s48a"] (~5 min).
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s48a/s48a.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='QkvAttention*' > "$L/tests-qkv.log" 2>&1
echo "qkv tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-qkv.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|want|bad values' "$L/tests-qkv.log" | head -20
pack
for round in 1 2; do
  for pp in 0 1; do
    for s in 256x128 256x32 32x128; do
      RLX_CUDA_QKV_ATTENTION_PP=$pp timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 --shape $s \
        > "$L/minilm-$s-pp$pp-$round.log" 2>&1
      echo "minilm $s pp=$pp round $round $(grep cuda-graphs "$L/minilm-$s-pp$pp-$round.log" | grep -oE '[0-9.]+ ms')"
    done
  done
done
pack
RLX_CUDA_QKV_ATTENTION_PP=1 RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 \
  --shape 256x128 > "$L/report-pp1.log" 2>&1
grep -E 'qkv projection.*measured' "$L/report-pp1.log" | grep -oE 'measured [0-9.]+ us' | tr '\n' ' '; echo
pack
suites
