#!/usr/bin/env bash
# Session 43 call 2: the f16 GELU-erf's exponential without exp2f's denormal scaling (B) against main (A),
# and two epilogue groupings on top of B (C: a barrier every 16 values, D: none).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43b.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:GemmLnSm90*:CudaKernels.*:CudaGraphs*:*Softmax*:FusionGpu*' > "$L/tests-B.log" 2>&1
echo "tests B rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-B.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-B.log" | head -5 | tr '\n' ' ')"
pack
for round in 1 2; do
  for v in A B C D; do
    f="$L/gemm-$v-$round.log"
    timeout 90 $R/rlx_gemm_bench_$v --only sm90 > "$f" 2>&1
    echo "gemm $v round $round rc=$? $(grep -E 'ffn1 +gelu_erf +ping-pong|ffn1 +none +ping-pong' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
  pack
done
for round in 1 2; do
  for v in A B; do
    f="$L/bert-$v-$round.log"
    timeout 120 $R/rlx_bert_bench_$v --graphs-only > "$f" 2>&1
    echo "bert $v round $round rc=$? $(grep -E '256x128' "$f" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
  done
  pack
done
