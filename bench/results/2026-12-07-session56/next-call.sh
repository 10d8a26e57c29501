#!/usr/bin/env bash
# For the next session's first device call (any GPU; ~550 s): session 56's final tree on a GPU.
# The fold kernels as rewritten after call 1 (tests, rlx_gemm_bench --only ln twice: the fold rows
# beside the fused GEMM + LN rows), the f16x2 GELU test with its final bound and the GELU A/B end to
# end on the H200 (call 1 was an H100), then the suites, the encoders beside the PyTorch peer with
# torch.compile, synthetic Gemma decode. Archive (not in git), built from the tree that runs it:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s56/s56.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/bench/rlx_quant_bench
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s56/s56.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmSm90*:CudaKernels.GeluErf*' > "$L/fold-gelu-tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|worst' "$L/fold-gelu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure' "$L/fold-gelu-tests.log" | head -8
for round in 1 2; do
  timeout 120 $R/rlx_gemm_bench --only ln > "$L/gemm-ln-$round.log" 2>&1
  echo "gemm ln round $round rc=$? $(grep -E 'residual|row scale|fused' "$L/gemm-ln-$round.log" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
done
pack
bert_ab minilm-l6 256x128 "RLX_CUDA_GELU_F16X2=1" "RLX_CUDA_GELU_F16X2=0"
suites
encoders
torch_peer
timeout 40 $R/rlx_generate_bench $G > "$L/gen-1.log" 2>&1
echo "gen rc=$? $(val "$L/gen-1.log")"
pack
