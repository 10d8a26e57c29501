#!/usr/bin/env bash
# Session 55 call 1 (whatever GPU comes; one call, as device starts kept failing): the K slab width
# of the fused QKV + attention and GEMM + LayerNorm kernels (RLX_CUDA_QKV_ATTENTION_BK /
# RLX_CUDA_GEMM_LN_BK = 64 or 32) and both kernels' W copies before their wait
# (RLX_CUDA_SM90_W_EARLY, off by default until measured): their tests, the encoders under each
# setting (two rounds interleaved); then the full GPU suite and CUDA conformance, the encoders
# beside the PyTorch peer (eager; torch.compile left out for time; issue 5), synthetic Gemma decode
# (issue 6). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s55b/s55b.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/bench/rlx_quant_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s55b/s55b.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmLnSm90.*:QkvAttentionSm90.*' > "$L/bk-tests.log" 2>&1
echo "bk tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/bk-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$L/bk-tests.log" | head -5
pack
bert_ab minilm-l6 256x128 "RLX_CUDA_SM90_W_EARLY=0" "RLX_CUDA_SM90_W_EARLY=1" "RLX_CUDA_QKV_ATTENTION_BK=32" \
  "RLX_CUDA_GEMM_LN_BK=32"
suites
encoders
timeout 40 $R/rlx_generate_bench $G > "$L/gen-1.log" 2>&1
echo "gen rc=$? $(val "$L/gen-1.log")"
pack
(cd bench && timeout 150 python3 bert_torch.py) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'MiniLM|BERT|bert|minilm' "$L/bert-torch.log" | grep -v '^{' | head -12 | tr '\n' '|')"
pack
