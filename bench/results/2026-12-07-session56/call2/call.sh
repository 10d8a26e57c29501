#!/usr/bin/env bash
# Session 56 call 2: the fold kernels with their rows' statistics requested before the wait for the
# tensor cores (call 1 had them as a dependent chain in the epilogue), the f16x2 GELU test with its
# bound as 2^-11·max(1, |x|); rlx_gemm_bench --only ln twice; MiniLM 256 × 128 at the defaults.
# (The full suite was left out: ~300 s of device budget remained; call 1 ran it.)
# Archive as call 1's (build/carry-s56/s56.tar.xz, rebuilt from the tree that runs it).
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s56/s56.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:CudaKernels.GeluErf*' > "$L/gelu-tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|worst' "$L/gelu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|gelu\(' "$L/gelu-tests.log" | head -8
for round in 1 2; do
  timeout 120 $R/rlx_gemm_bench --only ln > "$L/gemm-ln-$round.log" 2>&1
  echo "gemm ln round $round rc=$? $(grep -E 'residual|row scale|fused' "$L/gemm-ln-$round.log" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
done
pack
timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 --shape 256x128 > "$L/minilm-2.log" 2>&1
echo "minilm rc=$? $(grep cuda-graphs "$L/minilm-2.log" | sed 's/  */ /g')"
pack
