#!/usr/bin/env bash
# Session 54 call 1: the new fp8 matmul (ScaledMatMul) on the GPU — its tests
# (ScaledMatMulGpu.*, the CUDA scaled_matmul conformance cases), rlx_gemm_bench
# --only fp8 beside torch._scaled_mm (gemm_torch.py --only fp8), then the full
# GPU suite and conformance (cublaslt.cpp changed for every GEMM), then, on an
# H200, the FUSE_FFN_LN A/B left from session 52. Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s54a/s54a.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s54a/s54a.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='ScaledMatMul*' > "$L/fp8-tests.log" 2>&1
echo "fp8 gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|OK \]' "$L/fp8-tests.log" | tr '\n' ' ')"
grep -E "Failure|want|tol" "$L/fp8-tests.log" | head -12
timeout 60 $R/rlx_op_tests --gtest_filter='*cuda_scaled_matmul*' > "$L/fp8-conformance.log" 2>&1
echo "fp8 conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/fp8-conformance.log" | tr '\n' ' ')"
pack
timeout 150 $R/rlx_gemm_bench --only fp8 > "$L/gemm-fp8.log" 2>&1
echo "gemm fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8.log"
(cd bench && timeout 150 python3 gemm_torch.py --only fp8) > "$L/gemm-fp8-torch.log" 2>&1
echo "torch fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8-torch.log" | head -24
pack
suites
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bert_ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=0" "RLX_CUDA_FUSE_FFN_LN=1"
fi
