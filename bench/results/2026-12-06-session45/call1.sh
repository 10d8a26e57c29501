#!/usr/bin/env bash
# Session 45 call 1: K-slab rotation in the ping-pong GEMM and the GEMM + LayerNorm kernel, and the
# GEMM + LayerNorm kernel as 64-row CTAs two per SM (H, default) or 128-row CTAs (H with
# RLX_CUDA_GEMM_LN_ROWS=128, i.e. rotation only), against main (M).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s45a/s45a.tar.xz "${1:?OUT}"
F='GemmLnSm90*:GemmSm90*:FusionGpu*:BertGpu*:CudaGraphs*'
timeout 120 $R/rlx_gpu_tests_H --gtest_filter="$F" > "$L/tests-H64.log" 2>&1
echo "tests H64 rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-H64.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-H64.log" | head -5 | tr '\n' ' ')"
RLX_CUDA_GEMM_LN_ROWS=128 timeout 120 $R/rlx_gpu_tests_H --gtest_filter='GemmLnSm90*:FusionGpu*' > "$L/tests-H128.log" 2>&1
echo "tests H128 rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-H128.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-H128.log" | head -5 | tr '\n' ' ')"
pack
cp $R/rlx_gemm_bench_H $R/rlx_gemm_bench_H128; cp $R/rlx_bert_bench_H $R/rlx_bert_bench_H128
for round in 1 2; do
  for v in M H H128; do
    f="$L/gemm-$v-$round.log"
    if [ $v = H128 ]; then e=RLX_CUDA_GEMM_LN_ROWS=128; else e=X=1; fi
    env $e timeout 120 $R/rlx_gemm_bench_$v --only ln > "$f" 2>&1
    echo "ln $v $round rc=$? $(grep -E 'fused|unfused' "$f" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
bench_variants rlx_gemm_bench "--only sm90" 'QKV|FFN|attn' M H
for round in 1 2; do
  for v in M H H128 K; do
    f="$L/bert-$v-$round.log"
    if [ $v = H128 ]; then e=RLX_CUDA_GEMM_LN_ROWS=128; else e=X=1; fi
    env $e timeout 120 $R/rlx_bert_bench_$v --graphs-only > "$f" 2>&1
    echo "bert $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
