#!/usr/bin/env bash
# Session 52 call 1. Binaries of the commit that last edited this file (CUDA code as fe0e992, the CPU
# changes of sessions 51-52 included). Session 50's call 3: the two fusions left off at parity on H100s
# (RLX_CUDA_FUSE_FFN_LN, also with RLX_CUDA_FFN_ORDERED=0, and RLX_CUDA_GEMM_RESIDUAL) against the default
# on the H200, two rounds interleaved; decode with the attention's 128-key tiles walked by one CTA up to
# 256 keys (RLX_CUDA_DECODE_ATTN_TILES=2); the CPU tests and the bf16 matmul table (2 and 16 threads, for
# the RLX_CPU_AVX512_BF16 rule, measured so far on a Sapphire Rapids only) on the device host's CPU; a
# fresh decode trace; the PyTorch eager peer in the same call. Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s52a/s52a.tar.xz $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/tests/rlx_runtime_tests $B/bench/rlx_decode_trace $B/bench/rlx_cpu_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s52a/s52a.tar.xz "${1:?OUT}"
bert_ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=0" "RLX_CUDA_FUSE_FFN_LN=1" \
  "RLX_CUDA_FUSE_FFN_LN=1 RLX_CUDA_FFN_ORDERED=0"
bert_ab bert-base 256x128 "RLX_CUDA_GEMM_RESIDUAL=0" "RLX_CUDA_GEMM_RESIDUAL=1"
grep -m1 "model name" /proc/cpuinfo
for t in 2 16; do
  RLX_NUM_THREADS=$t timeout 60 $R/rlx_cpu_bench --bf16 --reps 7 > "$L/cpu-bf16-$t.log" 2>&1
  echo "cpu bf16 threads=$t rc=$?"; grep -E "^  [0-9M]" "$L/cpu-bf16-$t.log"
done
pack
gen_ab "RLX_CUDA_DECODE_ATTN_TILES=1" "RLX_CUDA_DECODE_ATTN_TILES=2"  # 129-256 keys in one CTA instead of two + merge
(cd bench && timeout 150 python3 bert_torch.py) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E '^(minilm|bert).*256x128' "$L/bert-torch.log" | head -4 | tr '\n' ' ')"
pack
host_cpu_tests
timeout 120 $R/rlx_decode_trace --synthetic --steps 64 --dtype bf16 > "$L/trace.log" 2>&1
echo "trace rc=$? $(grep -E 'host wall|GPU span' "$L/trace.log" | tr '\n' ' ')"
pack
