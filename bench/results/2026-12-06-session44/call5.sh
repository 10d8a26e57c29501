#!/usr/bin/env bash
# Session 44 call 5: which part of call 4's GEMM + LayerNorm change cost time. A: main; N: call 4's
# kernel (R by bulk copies into stages freed during the last slabs, accumulators from the bias,
# both rows and partial sums at a time); E1: N with R by every thread's cp.async after the main
# loop (as main); E2: E1 with the bias added in the epilogue from shared memory (as main).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44e/s44e.tar.xz "${1:?OUT}"
for round in 1 2; do
  for v in A N E1 E2; do
    f="$L/gemm-ln-$v-$round.log"
    timeout 60 $R/rlx_gemm_bench_$v --only ln > "$f" 2>&1
    echo "gemm-ln $v $round rc=$? $(grep -vE '^\{' "$f" | grep -E 'x384' | awk '{print $2, $5, $8}' | tr '\n' '|')"
  done
done
pack
for round in 1 2; do
  for v in A E1 E2; do
    f="$L/minilm-$v-$round.log"
    timeout 60 $R/rlx_bert_bench_$v --model minilm-l6 --graphs-only > "$f" 2>&1
    echo "minilm $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
