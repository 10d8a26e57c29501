#!/usr/bin/env bash
# Prepared in session 40 (its device time went to failed starts before it could run). From main, on the
# development machine:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s40d/s40d.tar.xz $B/bench/rlx_generate_bench $B/tests/rlx_gpu_tests \
#     $B/bench/rlx_grid_sync_bench
#   cp bench/results/2026-12-06-session40/next-call.sh build/carry-s40d/call.sh
# then run `bash build/carry-s40d/call.sh "$OUT"` carrying build/carry-s40d (29 MB), ~280 s:
# the tiny-model, GEMV, gather, attention, persistent and queued-run tests on the final tree; Gemma's Q6_K
# ffn_down on the streaming kernel against the unit kernel end to end; Nsight Compute on one persistent
# decode launch (warp stall reasons: why its ops take 4-24 us); rlx_grid_sync_bench's cluster rows (one
# cluster's barrier and DSMEM phase, how fast 2-132 CTAs stream from HBM, a decode step's phases on one cluster).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s40d/s40d.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='*TinyLlmGpu*:CudaQuantGemv.*:CudaQuantGather.*:AttentionGpu.*:PersistentGpu.*:QueuedRunsGpu.*' > "$L/tests-final.log" 2>&1
echo "final-tree tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-final.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-final.log" | head -5 | tr '\n' ' ')"
pack
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_STREAM=auto" "RLX_CUDA_GEMV_STREAM=0"; do
    f="$L/gen-${s//=/-}-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
pack
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
RLX_CUDA_PERSISTENT=1 timeout 170 "$NCU" --clock-control none --kernel-name regex:persistent_kernel \
  --launch-skip 40 --launch-count 1 $SECTIONS --section InstructionStats --section SourceCounters \
  --print-details all $R/rlx_generate_bench $G > "$L/ncu-persistent.txt" 2>&1
echo "ncu rc=$?"; grep -E "Stall|stall|Warp Cycles|Issued|Duration|Registers|Instructions" "$L/ncu-persistent.txt" | head -30
pack
timeout 60 $R/rlx_grid_sync_bench --iters 2000 > "$L/grid-sync.log" 2>&1; echo "grid sync rc=$?"; cat "$L/grid-sync.log"
pack
