#!/usr/bin/env bash
# Session 44 call 3: D = 64 attention tile shapes (A main: 4 warps x 2 m16 fragments, 2 CTAs/SM;
# D64M1: 4 warps x 1 fragment, 4/SM; D64W8: 8 warps x 1 fragment, 2/SM) on BERT-base, and
# MiniLM's FFN down + LayerNorm fused (K2048: the GEMM + LN lowering's K limit 512 -> 2048).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44c/s44c.tar.xz "${1:?OUT}"
for v in A D64M1 D64W8; do
  f="$L/attn-$v.log"
  timeout 60 $R/rlx_attention_bench_$v > "$f" 2>&1
  echo "attn $v rc=$?"; grep -E '^embed f16 D64' "$f" | sed 's/  */ /g'
done
pack
for round in 1 2; do
  for v in A D64M1 D64W8; do
    f="$L/bert-base-$v-$round.log"
    timeout 90 $R/rlx_bert_bench_$v --model bert-base --graphs-only > "$f" 2>&1
    echo "bert-base $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
  for v in A K2048; do
    f="$L/minilm-$v-$round.log"
    timeout 60 $R/rlx_bert_bench_$v --model minilm-l6 --graphs-only > "$f" 2>&1
    echo "minilm $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
f="$L/minilm-report-K2048.log"
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench_K2048 --model minilm-l6 --shape 256x128 --graphs-only > "$f" 2>&1
f="$L/minilm-report-A.log"
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench_A --model minilm-l6 --shape 256x128 --graphs-only > "$f" 2>&1
pack
