#!/usr/bin/env bash
# One device call for the QKV projection + attention kernel: build, its tests
# and the neighbours', MiniLM 256 x 128 and smaller batches (RLX_QKV_SHAPES)
# with the fusion on and off, then the ping-pong variant (RLX_CUDA_QKV_PINGPONG=1) the same way.
#   scripts/gpu_qkv_ab.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: scripts/gpu_qkv_ab.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh > /dev/null
exec > >(tee -a "$OUT/summary.log") 2>&1  # every line also in a file: the call's output tail is short
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
# RLX_PREBUILT: a folder holding rlx_gpu_tests, rlx_bert_bench and lib/ (scripts/carry_binaries.sh's
# archive, unpacked): no build here. Otherwise both are built.
if [ -n "${RLX_PREBUILT:-}" ]; then
  TESTS=$RLX_PREBUILT/rlx_gpu_tests BENCH=$RLX_PREBUILT/rlx_bert_bench
  export LD_LIBRARY_PATH=$RLX_PREBUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  t0=$(date +%s)
  scripts/gpu_targets.sh rlx_gpu_tests rlx_bert_bench > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s"
  TESTS=$B/tests/rlx_gpu_tests BENCH=$B/bench/rlx_bert_bench
fi
minilm() {  # shape, fuse setting → "ms"
  RLX_CUDA_FUSE_QKV_ATTENTION=$2 timeout 100 "$BENCH" --model minilm-l6 --shape "$1" --graphs-only 2>&1 |
    grep -E '^minilm' | awk '{print $4}'
}
check() {  # label
  timeout "${RLX_TEST_TIMEOUT:-200}" "$TESTS" --gtest_filter="${RLX_GT_FILTER:-Qkv*:GemmLn*:CudaGraphs*}" \
    > "$OUT/tests-$1.log" 2>&1
  local rc=$?
  echo "[$1] tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests-$1.log" | tr '\n' ' ')"
  grep -A8 'Failure' "$OUT/tests-$1.log" | head -24
  [ $rc = 0 ] || { echo "[$1] tests failed: no timings"; return; }
  for r in $(seq "${RLX_ROUNDS:-2}"); do
    echo "[$1] 256x128 round $r: fused $(minilm 256x128 1) ms, unfused $(minilm 256x128 0) ms"
  done
  # Small batches: where (if anywhere) the fused kernel stops paying (RLX_CUDA_QKV_ATTENTION_MIN_ROWS).
  for shape in ${RLX_QKV_SHAPES:-1x16 4x32 8x128 32x128 256x32}; do
    echo "[$1] $shape: fused $(minilm "$shape" 1) ms, unfused $(minilm "$shape" 0) ms"
  done
}
check base
# The kernel's own time beside the two it replaces (each thunk timed alone on the first run).
for s in 1 0; do
  RLX_DISPATCH_REPORT=1 RLX_CUDA_FUSE_QKV_ATTENTION=$s timeout 100 "$BENCH" --model minilm-l6 \
    --shape 256x128 --graphs-only > "$OUT/report-fuse$s.log" 2>&1
  echo "[report fuse=$s] $(grep -iE 'qkv|attention|matmul' "$OUT/report-fuse$s.log" | head -4 | tr -s ' ' | tr '\n' ';')"
done
RLX_CUDA_QKV_PINGPONG=1 RLX_GT_FILTER='Qkv*' RLX_TEST_TIMEOUT=60 RLX_ROUNDS=1 RLX_QKV_SHAPES='1x16 32x128' check pingpong
