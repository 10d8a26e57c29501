#!/usr/bin/env bash
# Session 43 call 6: CalibrationGpu three times with the re-timing that includes algo 0 (random operands as in call 5).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43f.tar.xz "${1:?OUT}"
for round in 1 2 3; do
  RLX_CALIB_DIR=$L/cal-test-$round timeout 150 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.*' > "$L/calib-$round.log" 2>&1
  echo "calibration round $round rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/calib-$round.log" | tr '\n' ' ')"
  grep -E "minilm down +32768|gemma down +512|[0-9]!|re-measured" "$L/calib-$round.log" | head -8
  rm -rf $L/cal-test-$round; pack
done
