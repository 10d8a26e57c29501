#!/usr/bin/env bash
# Session 49 call 3: the fixed lowering test (call 2's declared a bias and beta it did not always use)
# and the tests that moved to the shared BERT helper, with RLX_CUDA_GEMM_RESIDUAL now off by default.
# Not run this session (too little device time was left). Its archive, not in git, is made by
#   scripts/carry_binaries.sh build/carry-s49c/s49c.tar.xz build/sm90/tests/rlx_gpu_tests
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s49c/s49c.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='GemmResidual*:GemmLn*:FfnLn*:FusionGpu*:Bert*:Calibration*' \
  > "$L/tests-focus.log" 2>&1
echo "focus rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
pack
