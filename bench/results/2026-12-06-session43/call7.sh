#!/usr/bin/env bash
# Session 43 call 7: as call 6, with each GEMM dtype calibrated on operands of its own type.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43g.tar.xz "${1:?OUT}"
for round in 1 2 3; do
  RLX_CALIB_DIR=$L/cal-test-$round timeout 150 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.*' > "$L/calib-$round.log" 2>&1
  echo "calibration round $round rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/calib-$round.log" | tr '\n' ' ')"
  grep -E "minilm down +32768|gemma down +512|[0-9]!|re-measured" "$L/calib-$round.log" | head -8
  rm -rf $L/cal-test-$round; pack
done
