#!/usr/bin/env bash
# Session 41 call 1: the final tree of session 40 (library == 2c59bb1) on the GPU: full rlx_gpu_tests,
# CUDA op conformance, Gemma Q6_K ffn_down streaming vs unit GEMV, rlx_grid_sync_bench's cluster rows,
# then Nsight Compute on one persistent decode launch.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41a/s41a.tar.xz "${1:?OUT}"
timeout 60 $R/rlx_grid_sync_bench --iters 2000 > "$L/grid-sync.log" 2>&1; echo "grid sync rc=$?"; cat "$L/grid-sync.log"
pack
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_STREAM=auto" "RLX_CUDA_GEMV_STREAM=0"; do
    f="$L/gen-${s//=/-}-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
pack
timeout 240 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
pack
timeout 90 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
pack
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
RLX_CUDA_PERSISTENT=1 timeout 150 "$NCU" --clock-control none --kernel-name regex:persistent_kernel \
  --launch-skip 40 --launch-count 1 $SECTIONS --section InstructionStats --section SourceCounters \
  --print-details all $R/rlx_generate_bench $G > "$L/ncu-persistent.txt" 2>&1
echo "ncu rc=$?"; grep -E "Stall|stall|Warp Cycles|Issued|Duration|Registers|Instructions" "$L/ncu-persistent.txt" | head -30
pack
