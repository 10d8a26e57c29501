#!/usr/bin/env bash
# Session 54 call 4: the fp8 quantization kernel with rows in registers (a warp or a CTA per row,
# 16-byte loads) replacing call 3's CTA-per-row scalar kernel (2-3x its bytes' time): the fp8 GPU
# tests (every kernel form against the CPU bit for bit), the fp8 rows of rlx_gemm_bench, the GPU
# suite and conformance. Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s54d/s54d.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s54d/s54d.tar.xz "${1:?OUT}"
timeout 200 $R/rlx_gpu_tests --gtest_filter="ScaledMatMul*" > "$L/fp8-tests.log" 2>&1
echo "fp8 gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|OK \]' "$L/fp8-tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Which is|scale|Trace|K=" "$L/fp8-tests.log" | head -12
timeout 150 $R/rlx_gemm_bench --only fp8 > "$L/gemm-fp8.log" 2>&1
echo "gemm fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8.log" | grep -E "linear|8192x8192x8192 \(square\)"
pack
suites
