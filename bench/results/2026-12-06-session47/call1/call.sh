#!/usr/bin/env bash
# Prepared in session 46 (not run): branch pp-activation-helper-warps (H, 42b01ad) against main (M).
# H's ping-pong GEMM stages rounded tiles and its producer warpgroup's helper warps apply the
# activation and store; RLX_CUDA_PP_CONSUMER_ACT_GROUPS=G gives the consumers the first G of 16
# column groups (H0, H4, H8 below). Focused tests (G = 0 and 6), gemm bench (sm90 rows) and
# MiniLM/BERT end to end, two rounds interleaved, then H's full suite and conformance.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s47a/s47a.tar.xz "${1:?OUT}"
for g in 0 6; do
  RLX_CUDA_PP_CONSUMER_ACT_GROUPS=$g timeout 120 $R/rlx_gpu_tests \
    --gtest_filter='GemmSm90*:FusionGpu*:BertGpu*:GemmLn*' > "$L/tests-focus-g$g.log" 2>&1
  echo "focus g$g rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus-g$g.log" | tr '\n' ' ')" \
    "$(grep -E '^\[  FAILED  \]' "$L/tests-focus-g$g.log" | head -5 | tr '\n' ' ')"
done
pack
run_v() {  # run_v BIN ARGS PATTERN VARIANT ROUND: VARIANT is M or H<groups>
  local bin=$1 args=$2 pat=$3 v=$4 round=$5 f="$L/$1-$4-$5.log"
  if [ "$v" = M ]; then timeout 120 $R/${bin}_M $args > "$f" 2>&1
  else RLX_CUDA_PP_CONSUMER_ACT_GROUPS=${v#H} timeout 120 $R/${bin}_H $args > "$f" 2>&1; fi
  echo "$bin $v round $round rc=$? $(grep -E "$pat" "$f" | sed 's/  */ /g' | tr '\n' '|')"
}
for round in 1 2; do
  for v in M H0 H4 H8; do run_v rlx_gemm_bench "--only sm90" 'ping-pong ' $v $round; done
  pack
done
for round in 1 2; do
  for v in M H0 H4 H8; do run_v rlx_bert_bench "--graphs-only" 'cuda-graphs' $v $round; done
  pack
done
suites
