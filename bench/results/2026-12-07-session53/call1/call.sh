#!/usr/bin/env bash
# Session 53 call 1 (session 52's call, reordered so the measurements come first and the slower checks
# go to call 2). Binaries of f1722ef (CUDA code as fe0e992). The two fusions left at parity on H100s
# (RLX_CUDA_FUSE_FFN_LN, also with RLX_CUDA_FFN_ORDERED=0; RLX_CUDA_GEMM_RESIDUAL) against the default
# on the H200, two rounds interleaved; decode with RLX_CUDA_DECODE_ATTN_TILES=2; the PyTorch peer in the
# same call; the bf16 CPU matmul table on the device host's CPU (2 and 16 threads, for the
# RLX_CPU_AVX512_BF16 rule). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s53a/s53a.tar.xz $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/tests/rlx_runtime_tests $B/bench/rlx_decode_trace \
#     $B/bench/rlx_cpu_bench $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s53a/s53a.tar.xz "${1:?OUT}"
bert_ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=0" "RLX_CUDA_FUSE_FFN_LN=1" \
  "RLX_CUDA_FUSE_FFN_LN=1 RLX_CUDA_FFN_ORDERED=0"
bert_ab bert-base 256x128 "RLX_CUDA_GEMM_RESIDUAL=0" "RLX_CUDA_GEMM_RESIDUAL=1"
(cd bench && timeout 150 python3 bert_torch.py) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E '^(minilm|bert).*256x128' "$L/bert-torch.log" | head -4 | tr '\n' ' ')"
pack
gen_ab "RLX_CUDA_DECODE_ATTN_TILES=1" "RLX_CUDA_DECODE_ATTN_TILES=2"  # 129-256 keys in one CTA instead of two + merge
grep -m1 "model name" /proc/cpuinfo
for t in 2 16; do
  RLX_NUM_THREADS=$t timeout 60 $R/rlx_cpu_bench --bf16 --reps 7 > "$L/cpu-bf16-$t.log" 2>&1
  echo "cpu bf16 threads=$t rc=$?"; grep -E "^  [0-9M]" "$L/cpu-bf16-$t.log"
done
pack
