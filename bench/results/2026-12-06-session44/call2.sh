#!/usr/bin/env bash
# Session 44 call 2: D = 32 attention tile shapes (A main: 4 warps, 64-key tiles, 5 CTAs/SM;
# W8: 8 warps (2/SM); W8b: 8 warps, 3/SM; N128: 4 warps, 128-key tiles; W8N128).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44b/s44b.tar.xz "${1:?OUT}"
for v in A W8 W8b N128 W8N128; do
  f="$L/attn-$v.log"
  timeout 60 $R/rlx_attention_bench_$v > "$f" 2>&1
  echo "attn $v rc=$?"; grep -E '^embedding|D32|D 32' "$f" | head -8 | sed 's/  */ /g'
done
pack
for round in 1 2; do
  for v in A W8 W8b N128 W8N128; do
    f="$L/bert-$v-$round.log"
    timeout 60 $R/rlx_bert_bench_$v --model minilm-l6 --graphs-only > "$f" 2>&1
    echo "bert $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
