#!/usr/bin/env bash
# Session 43 call 10: quantize_x without IEEE divisions (B) against b6d042e (A): GEMV / tiny-model tests,
# GEMV rows and decode, interleaved.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43i.tar.xz "${1:?OUT}"
timeout 70 $R/rlx_gpu_tests --gtest_filter='CudaQuantGemv*:TinyLlmGpu*' > "$L/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests.log" | head -4 | tr '\n' ' ')"
pack
for round in 1 2; do
  for v in A B; do
    f="$L/gen-$v-$round.log"
    timeout 60 $R/rlx_generate_bench_$v $G > "$f" 2>&1
    echo "gen $v round $round rc=$? $(val "$f")"
  done
done
pack
for v in A B; do
  f="$L/quant-$v.log"
  timeout 60 $R/rlx_quant_bench_$v --only gemv --types q4_0,q4_k > "$f" 2>&1
  echo "quant $v rc=$?"; grep -E '^(gemv-stream|gemv-staged 262144)' "$f" | grep -E 'graph|262144' | sed 's/  */ /g'
  pack
done
