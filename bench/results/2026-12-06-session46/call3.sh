#!/usr/bin/env bash
# Session 46 call 3: D = 32 prefill attention shapes for <= 128 keys, chosen by RLX_EXP_ATTN32
# (0 main: 4 warps, 64 rows, 64-key tiles; 1: 8 warps, 128 rows; 2: 4 warps, 128-key tile;
# 3: 8 warps, 128 rows, 128-key tile). MiniLM end to end round 1, tests under each variant,
# round 2, then the attention bench while time is left.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s46b/s46b.tar.xz "${1:?OUT}"
bert_round() {
  local v
  for v in 0 1 2 3; do
    RLX_EXP_ATTN32=$v timeout 30 $R/rlx_bert_bench --graphs-only --model minilm-l6 > "$L/bert-$v-$1.log" 2>&1
    echo "bert v$v r$1 rc=$? $(grep -E 'cuda-graphs' "$L/bert-$v-$1.log" | sed 's/  */ /g' | tr '\n' '|')"
  done
  pack
}
bert_round 1
for v in 1 2 3; do
  RLX_EXP_ATTN32=$v timeout 40 $R/rlx_gpu_tests --gtest_filter='Attention*:BertGpu*' > "$L/tests-$v.log" 2>&1
  echo "tests v$v rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-$v.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-$v.log" | head -5 | tr '\n' ' ')"
  pack
done
bert_round 2
for v in 0 1 2 3; do
  RLX_EXP_ATTN32=$v timeout 40 $R/rlx_attention_bench > "$L/attn-$v.log" 2>&1
  echo "attn v$v rc=$? $(grep -E '^embed f16 D32' "$L/attn-$v.log" | sed 's/  */ /g' | tr '\n' '|')"
  pack
done
