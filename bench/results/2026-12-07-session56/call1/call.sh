#!/usr/bin/env bash
# Session 56 call 1: the LayerNorm-fold kernels (Sm90LnFold: tests, rlx_gemm_bench rows); the
# ping-pong GEMM's f16 GELU-erf in f16x2 arithmetic (RLX_CUDA_GELU_F16X2,
# default 1): its every-input test, rlx_gemm_bench --only sm90 and the encoders under both settings
# (rounds interleaved), and the fused FFN (RLX_CUDA_FUSE_FFN_LN, whose GELU now takes the same form)
# on and off; the full GPU suite and CUDA conformance; the encoders beside the PyTorch
# peer (eager and torch.compile; issue 5). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s56/s56.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/bench/rlx_quant_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s56/s56.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:CudaKernels.GeluErf*' > "$L/gelu-tests.log" 2>&1
echo "gelu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|worst' "$L/gelu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|gelu\(' "$L/gelu-tests.log" | head -8
pack
bert_ab minilm-l6 256x128 "RLX_CUDA_GELU_F16X2=1" "RLX_CUDA_GELU_F16X2=0"
for round in 1 2; do
  for v in 0 1; do
    RLX_CUDA_GELU_F16X2=$v timeout 120 $R/rlx_gemm_bench --only sm90 > "$L/gemm-sm90-$v-$round.log" 2>&1
    echo "gemm f16x2=$v round $round rc=$? $(grep -iE 'ffn1 +gelu|residual|row scale|fused' "$L/gemm-sm90-$v-$round.log" | sed 's/  */ /g' | tr '\n' '|')"
  done
done
pack
bert_ab bert-base 256x128 "RLX_CUDA_GELU_F16X2=1" "RLX_CUDA_GELU_F16X2=0"
bert_ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=1" "RLX_CUDA_FUSE_FFN_LN=0"
suites
encoders
(cd bench && timeout 200 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'MiniLM|BERT|bert|minilm' "$L/bert-torch.log" | grep -v '^{' | head -12 | tr '\n' '|')"
pack
