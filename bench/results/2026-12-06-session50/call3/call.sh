#!/usr/bin/env bash
# Session 50 call 3 (binaries of c508e8b's library code): the two fusions measured at parity on H100s and left off
# (RLX_CUDA_FUSE_FFN_LN, session 48; RLX_CUDA_GEMM_RESIDUAL, session 49), now on the issue's H200,
# two rounds interleaved against the default; the CPU tests (AMX bf16 where the host CPU has it). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s50b/s50b.tar.xz $B/bench/rlx_bert_bench \
#     $B/bench/rlx_generate_bench $B/tests/rlx_runtime_tests
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s50b/s50b.tar.xz "${1:?OUT}"
grep -o -m1 -E 'amx_bf16|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
timeout 120 $R/rlx_runtime_tests --gtest_filter='CpuKernelsB.*:Runtime.*' > "$L/runtime-tests.log" 2>&1
echo "runtime tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|SKIPPED|Amx' "$L/runtime-tests.log" | head -6 | tr '\n' ' ')"
pack
ab() {  # model shape setting...
  local m=$1 s=$2 round v f
  shift 2
  for round in 1 2; do
    for v in "$@"; do
      f="$L/$m-$s-$(echo "$v" | tr " =" "_-")-$round.log"
      env $v timeout 60 $R/rlx_bert_bench --graphs-only --model $m --shape $s > "$f" 2>&1
      echo "$m $s $v round $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g')"
    done
  done
  pack
}
ab minilm-l6 256x128 "RLX_CUDA_FUSE_FFN_LN=0" "RLX_CUDA_FUSE_FFN_LN=1"
ab bert-base 256x128 "RLX_CUDA_GEMM_RESIDUAL=0" "RLX_CUDA_GEMM_RESIDUAL=1"
