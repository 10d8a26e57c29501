#!/usr/bin/env bash
# Prepared in session 41 (all its calls got an H100; its device time ran out). From main, on the
# development machine:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s42/s42.tar.xz $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests \
#     $B/bench/rlx_generate_bench $B/bench/rlx_bert_bench $B/bench/rlx_decode_cluster_bench
#   cp bench/results/2026-12-06-session41/next-call.sh build/carry-s42/call.sh
# then run `bash build/carry-s42/call.sh "$OUT"` carrying build/carry-s42 (~31 MB), ~300 s. On an H200
# it gives what session 41 could not: the Q6_K stream rule (auto) against RLX_CUDA_GEMV_STREAM=0 and
# the decode prototype's two forms on the issue's GPU, the full suites, and the encoder figures.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s42/s42.tar.xz "${1:?OUT}"
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_STREAM=auto" "RLX_CUDA_GEMV_STREAM=0"; do
    f="$L/gen-${s//=/-}-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
pack
timeout 60 $R/rlx_decode_cluster_bench --keys 96 --steps 50 > "$L/proto-keys96.log" 2>&1
echo "prototype rc=$? $(grep -E 'median|a layer' "$L/proto-keys96.log" | tr '\n' '|')"
pack
timeout 200 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
pack
timeout 60 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
pack
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
pack
