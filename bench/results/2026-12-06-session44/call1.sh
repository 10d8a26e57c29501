#!/usr/bin/env bash
# Prepared in session 43 (its device time ran out before call10.sh could run). From main, on the
# development machine:
#   B=build/sm90; V=build/var-s44; mkdir -p $V
#   ninja -C $B rlx_gpu_tests rlx_op_tests rlx_quant_bench rlx_generate_bench rlx_bert_bench
#   cp $B/bench/rlx_quant_bench $V/rlx_quant_bench_A; cp $B/bench/rlx_generate_bench $V/rlx_generate_bench_A
#   git checkout quantize-x-no-division -- rlx/backends/cuda/kernels/gemv_common.cuh
#   ninja -C $B rlx_quant_bench rlx_generate_bench rlx_gpu_tests
#   cp $B/bench/rlx_quant_bench $V/rlx_quant_bench_B; cp $B/bench/rlx_generate_bench $V/rlx_generate_bench_B
#   cp $B/tests/rlx_gpu_tests $V/rlx_gpu_tests_B
#   git checkout main -- rlx/backends/cuda/kernels/gemv_common.cuh; ninja -C $B rlx_gpu_tests
#   scripts/carry_binaries.sh build/carry-s44/s44.tar.xz $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests \
#     $B/bench/rlx_bert_bench $V/rlx_gpu_tests_B $V/rlx_quant_bench_A $V/rlx_quant_bench_B \
#     $V/rlx_generate_bench_A $V/rlx_generate_bench_B
#   cp bench/results/2026-12-06-session43/next-call.sh build/carry-s44/call.sh
# then run `bash build/carry-s44/call.sh "$OUT"` carrying build/carry-s44 (check the archive stays
# under ~42 MB: the tree is ~22 MB of the 64 MiB), ~400 s. It decides quantize_x without IEEE
# divisions (branch quantize-x-no-division: B) against main (A), and gives main's figures on
# whatever GPU comes (the issues' targets are the H200's).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s44/s44.tar.xz "${1:?OUT}"
timeout 100 $R/rlx_gpu_tests_B --gtest_filter='CudaQuant*:*Gemv*:TinyLlmGpu*:QueuedRuns*' > "$L/tests-B.log" 2>&1
echo "tests B rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-B.log" | tr '\n' ' ')"
pack
gen_variants A B
for v in A B; do
  f="$L/quant-$v.log"
  timeout 90 $R/rlx_quant_bench_$v --only gemv --types q4_0,q5_0,q8_0,q4_k,q5_k,q6_k,iq4_xs > "$f" 2>&1
  echo "quant $v rc=$?"; grep -E '^(gemv-stream|read-only|gemv-staged 262144|this GPU)' "$f" | grep -E 'graph|262144|GPU' | sed 's/  */ /g'
  pack
done
suites
encoders
