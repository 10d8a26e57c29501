#!/usr/bin/env bash
# Session 45 call 2: B = the GEMM + LayerNorm kernel's K-slab rotation + the fusion's K limit
# 512 -> 2048 (MiniLM's FFN down + norm fused); P = B + the ping-pong GEMM's tiles starting at K slab
# (row block mod slabs) + the GEMM + LayerNorm kernel in 2-CTA clusters sharing W by multicast
# (P0: the same binary with RLX_CUDA_GEMM_LN_PAIR=0). Against main (M).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s45c/s45c.tar.xz "${1:?OUT}"
timeout 240 $R/rlx_gpu_tests_P > "$L/gpu-tests-P.log" 2>&1
echo "gpu tests P rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests-P.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests-P.log" | head -5 | tr '\n' ' ')"
RLX_CUDA_GEMM_LN_PAIR=0 timeout 100 $R/rlx_gpu_tests_P --gtest_filter='GemmLnSm90*' > "$L/tests-P0.log" 2>&1
echo "tests P0 rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-P0.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-P0.log" | head -5 | tr '\n' ' ')"
pack
cp $R/rlx_gemm_bench_P $R/rlx_gemm_bench_P0; cp $R/rlx_bert_bench_P $R/rlx_bert_bench_P0
run_v() {  # BIN ARGS PATTERN VARIANT...: P0 runs P's binary without pairs
  local bin=$1 args=$2 pat=$3 round v f e
  shift 3
  for round in 1 2; do
    for v in "$@"; do
      f="$L/$bin-$v-$round.log"; e=X=1; [ $v = P0 ] && e=RLX_CUDA_GEMM_LN_PAIR=0
      env $e timeout 120 $R/${bin}_$v $args > "$f" 2>&1
      echo "$bin $v round $round rc=$? $(grep -E "$pat" "$f" | sed 's/  */ /g' | tr '\n' '|')"
    done
  done
  pack
}
run_v rlx_gemm_bench "--only ln" 'minilm (attn-out|ffn2) +[0-9]+x' M P0 P
run_v rlx_gemm_bench "--only sm90" '^ .* ping-pong +[0-9]' M P
run_v rlx_bert_bench "--graphs-only" 'cuda-graphs' M B P0 P
RLX_DISPATCH_REPORT=1 timeout 120 $R/rlx_bert_bench_P --model minilm-l6 --graphs-only --shape 256x128 > "$L/report-P.log" 2>&1
pack
timeout 60 $R/rlx_op_tests_P --gtest_filter='*cuda*' > "$L/conformance-P.log" 2>&1
echo "conformance P rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance-P.log" | tr '\n' ' ')"
pack
