#!/usr/bin/env bash
# Session 43 call 4: CalibrationGpu with random operands in the GEMM-choice test (was: constant 0x3C3C), twice.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43d.tar.xz "${1:?OUT}"
for round in 1 2; do
  timeout 200 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.*' > "$L/calib-$round.log" 2>&1
  echo "calibration round $round rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/calib-$round.log" | tr '\n' ' ')"
  grep -E "minilm down +32768|1\\.0[5-9][0-9]!|re-measured" "$L/calib-$round.log" | head -6
  pack
done
