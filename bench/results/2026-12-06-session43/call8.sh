#!/usr/bin/env bash
# Session 43 call 8 (run inline on the H200 that call 7 left warm): the full GPU suite of b6d042e.
source scripts/carried_call.sh build/carry-s43/s43g.tar.xz "$OUT"; timeout 280 $R/rlx_gpu_tests > "$L/gpu-tests-h200.log" 2>&1; echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests-h200.log" | tr '\n' ' ')"; grep -E "^\[  FAILED  \]|[0-9]!" "$L/gpu-tests-h200.log" | head -8; pack
