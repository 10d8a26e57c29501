#!/usr/bin/env bash
# Session 54 call 3, the final tree: fp8 weights in DequantMatMul (QuantBlock<F8E4M3/F8E5M2>; every
# CudaQuant test now also covers them), the fp8 matmul tests, then the full GPU suite and the CUDA
# conformance, then the fp8 GEMM and fp8 linear (fused quantization) rows beside torch again, and MiniLM / BERT-base
# (nothing of theirs changed; the check that cublaslt.cpp's changes cost them nothing). Archive:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s54c/s54c.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s54c/s54c.tar.xz "${1:?OUT}"
timeout 200 $R/rlx_gpu_tests --gtest_filter="CudaQuant*:ScaledMatMul*" > "$L/quant-fp8-tests.log" 2>&1
echo "quant + fp8 gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/quant-fp8-tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$L/quant-fp8-tests.log" | head -8
pack
suites
timeout 150 $R/rlx_gemm_bench --only fp8 > "$L/gemm-fp8.log" 2>&1
echo "gemm fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8.log"
(cd bench && timeout 150 python3 gemm_torch.py --only fp8) > "$L/gemm-fp8-torch.log" 2>&1
echo "torch fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8-torch.log"
pack
encoders
