#!/usr/bin/env bash
# Session 41 call 2: the one-cluster decode prototype (rlx_decode_cluster_bench), the GEMV tests after the
# chunk decoders moved to device/stream_chunk.cuh, the Q6_K ffn_down streaming A/B, a decode trace.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41b/s41b.tar.xz "${1:?OUT}"
for k in 96 160 512; do
  timeout 60 $R/rlx_decode_cluster_bench --keys $k --steps 100 > "$L/cluster-keys$k.log" 2>&1; echo "cluster keys $k rc=$?"; cat "$L/cluster-keys$k.log"
done
pack
timeout 120 $R/rlx_gpu_tests --gtest_filter='CudaQuantGemv.*:CudaQuantGather.*:*TinyLlmGpu*' > "$L/tests.log" 2>&1
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
timeout 60 $R/rlx_decode_trace --synthetic --dtype bf16 --steps 64 > "$L/trace.log" 2>&1; echo "trace rc=$? $(sed -n 3,6p "$L/trace.log" | tr '\n' '|')"
pack
