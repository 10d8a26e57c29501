#!/usr/bin/env bash
# Session 44 call 4: the GEMM + LayerNorm kernel's new epilogue (R copied into freed stages during
# the last slabs, accumulators from the bias, both rows and partial sums at a time) and the D = 64
# short-key attention shape: their tests, then A (main) against N (this tree), and NK2048 (N with
# MiniLM's FFN down + LayerNorm fused too).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44d/s44d.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmLnSm90*:AttentionGpu*:FusionGpu*:CudaGraphs*' > "$L/tests-N.log" 2>&1
echo "tests N rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-N.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-N.log" | head -5 | tr '\n' ' ')"
pack
for round in 1 2; do
  for v in A N; do
    f="$L/gemm-ln-$v-$round.log"
    timeout 60 $R/rlx_gemm_bench_$v --only ln > "$f" 2>&1
    echo "gemm-ln $v $round rc=$? $(grep -vE '^\{' "$f" | grep -E 'MiniLM|BERT|x' | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
for round in 1 2; do
  for v in A N NK2048; do
    f="$L/minilm-$v-$round.log"
    timeout 60 $R/rlx_bert_bench_$v --model minilm-l6 --graphs-only > "$f" 2>&1
    echo "minilm $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
  for v in A N; do
    f="$L/bert-base-$v-$round.log"
    timeout 90 $R/rlx_bert_bench_$v --model bert-base --graphs-only > "$f" 2>&1
    echo "bert-base $v $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench_N --model minilm-l6 --shape 256x128 --graphs-only > "$L/minilm-report-N.log" 2>&1
pack
timeout 240 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
pack
