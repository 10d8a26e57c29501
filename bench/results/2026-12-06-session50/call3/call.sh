#!/usr/bin/env bash
# Session 50 call 3 (binaries of c508e8b's library code): the two fusions measured at parity on H100s and left off
# (RLX_CUDA_FUSE_FFN_LN, session 48; RLX_CUDA_GEMM_RESIDUAL, session 49), now on the issue's H200,
# two rounds interleaved against the default; the CPU tests (AMX bf16 where the host CPU has it). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s50b/s50b.tar.xz $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/tests/rlx_runtime_tests
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s50b/s50b.tar.xz "${1:?OUT}"
host_cpu_tests
bert_ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=0" "RLX_CUDA_FUSE_FFN_LN=1"
bert_ab bert-base 256x128 "RLX_CUDA_GEMM_RESIDUAL=0" "RLX_CUDA_GEMM_RESIDUAL=1"
