#!/usr/bin/env bash
# Session 54 call 2: call 1's fp8 failures fixed (the GPU test read an fp8
# tensor as u8; f32 results of fp8 tensor cores hold ~14-bit sums, which the
# f32 conformance tolerance and the quantization test now allow for): the fp8
# GPU tests and CUDA scaled_matmul conformance again. Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s54b/s54b.tar.xz $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s54b/s54b.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='ScaledMatMul*' > "$L/fp8-tests.log" 2>&1
echo "fp8 gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|OK \]' "$L/fp8-tests.log" | tr '\n' ' ')"
grep -E "Failure|want|tol|exception" "$L/fp8-tests.log" | head -12
timeout 60 $R/rlx_op_tests --gtest_filter='*cuda_scaled_matmul*' > "$L/fp8-conformance.log" 2>&1
echo "fp8 conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/fp8-conformance.log" | tr '\n' ' ')"
grep -E "max \|err" "$L/fp8-conformance.log" | head
pack
