#!/usr/bin/env bash
# Session 43 call 5: the calibration on random f16 operands (B) against the constant 0x3C fill (A):
# CalibrationGpu twice, then encoders and decode/prefill, each variant calibrating into its own folder.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43e.tar.xz "${1:?OUT}"
for round in 1 2; do
  RLX_CALIB_DIR=$L/cal-test-$round timeout 200 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.*' > "$L/calib-$round.log" 2>&1
  echo "calibration round $round rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/calib-$round.log" | tr '\n' ' ')"
  grep -E "minilm down +32768|gemma down +512|[0-9]!|re-measured" "$L/calib-$round.log" | head -8
  pack
done
for round in 1 2; do
  for v in A B; do
    f="$L/bert-$v-$round.log"
    RLX_CALIBRATE=auto RLX_CALIB_DIR=$L/cal-$v timeout 150 $R/rlx_bert_bench_$v --graphs-only > "$f" 2>&1
    echo "bert $v round $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | tr '\n' '|')"
    f="$L/gen-$v-$round.log"
    RLX_CALIBRATE=auto RLX_CALIB_DIR=$L/cal-$v timeout 90 $R/rlx_generate_bench_$v $G > "$f" 2>&1
    echo "gen $v round $round rc=$? $(val "$f")"
  done
  pack
done
