#!/usr/bin/env bash
# Prepared in session 42 (all its calls got an H100; its device time ran out). From main, on the
# development machine:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s43/s43.tar.xz $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests \
#     $B/bench/rlx_quant_bench $B/bench/rlx_generate_bench $B/bench/rlx_bert_bench
#   cp bench/results/2026-12-06-session42/next-call.sh build/carry-s43/call.sh
# then run `bash build/carry-s43/call.sh "$OUT"` carrying build/carry-s43 (~30 MB), ~330 s. On an H200
# it gives what sessions 41 and 42 could not: the streaming GEMV's bulk x (RLX_CUDA_GEMV_X_BULK) and
# the head's int8 x (RLX_CUDA_GEMV_STAGED_Q8) against their off settings on the issue's GPU, the GEMV
# rows for issue 4's table, the full suites after the staged change, and the encoder figures.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43.tar.xz "${1:?OUT}"
T=q4_0,q5_0,q8_0,q4_k,q5_k,q6_k,iq4_xs
for v in "RLX_CUDA_GEMV_X_BULK=1" "RLX_CUDA_GEMV_X_BULK=0"; do
  f="$L/quant-${v//=/-}.log"
  env $v timeout 150 $R/rlx_quant_bench --only gemv --types $T > "$f" 2>&1
  echo "== $v rc=$?"
  grep -E '^(gemv-stream|read-only|gemv-staged 262144).*|^FAIL|^this GPU' "$f" | grep -E 'graph|262144|FAIL|GPU' | sed 's/  */ /g'
  pack
done
gen_ab "RLX_CUDA_GEMV_STAGED_Q8=1" "RLX_CUDA_GEMV_STAGED_Q8=0"
suites
encoders
# Session 43: the q6k-phase variant (session 42's untested-q6k-phase.patch) against main, interleaved.

V=$R
timeout 90 $V/rlx_gpu_tests_q6k --gtest_filter='CudaQuantGemv*:CudaQuantGemm*' > "$L/q6k-tests.log" 2>&1
echo "q6k variant tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/q6k-tests.log" | tr '\n' ' ')"
for round in 1 2; do
  for b in $R/rlx_quant_bench $V/rlx_quant_bench_q6k; do
    f="$L/q6k-$(basename $b)-$round.log"
    timeout 60 $b --only gemv --types q6_k > "$f" 2>&1
    echo "$(basename $b) round $round rc=$?"; grep -E '^gemv-stream.*graph' "$f" | sed 's/  */ /g'
  done
done
pack
