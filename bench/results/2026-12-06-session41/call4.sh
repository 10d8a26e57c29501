#!/usr/bin/env bash
# Session 41 call 4: the decode prototype on one cluster and on every SM (grid barriers); the GEMV tests
# with the Q6_K stream threshold; decode with it (auto) against RLX_CUDA_GEMV_STREAM=0.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41d/s41d.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_decode_cluster_bench --keys 96 --steps 50 > "$L/proto-keys96.log" 2>&1; echo "rc=$?"; cat "$L/proto-keys96.log"
pack
timeout 100 $R/rlx_gpu_tests --gtest_filter='CudaQuantGemv.*:*TinyLlmGpu*' > "$L/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests.log" | head -5 | tr '\n' ' ')"
pack
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_STREAM=auto" "RLX_CUDA_GEMV_STREAM=0"; do
    f="$L/gen-${s//=/-}-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
pack
