#!/usr/bin/env bash
# Session 42 call 7: int8 x in the staged GEMV (the output head), decode A/B, GEMV tests.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s42/s42.tar.xz "${1:?OUT}"
for v in "RLX_CUDA_GEMV_STAGED_Q8=1" "RLX_CUDA_GEMV_STAGED_Q8=0"; do
  f="$L/head-${v//=/-}.log"
  env $v timeout 40 $R/rlx_quant_bench --only gemv --types q8_0 > "$f" 2>&1
  echo "$v rc=$? $(grep -E '^gemv-staged 262144x640|^FAIL' "$f" | sed 's/  */ /g' | tr '\n' '|')"
done
pack
for v in "new RLX_CUDA_GEMV_STAGED_Q8=1" "new RLX_CUDA_GEMV_STAGED_Q8=0" "base RLX_CUDA_GEMV_STAGED_Q8=1" "new RLX_CUDA_GEMV_STAGED_Q8=1"; do
  set -- $v
  b=rlx_generate_bench; [ $1 = base ] && b=rlx_generate_bench_base
  f="$L/gen-$1-${2//=/-}.log"
  env $2 timeout 40 $R/$b $G > "$f" 2>&1
  echo "$v rc=$? $(val "$f")"
  cat "$f" >> "$L/gen-all.log"
done
pack
timeout 60 $R/rlx_gpu_tests --gtest_filter='CudaQuant*:*TinyLlm*:*Gemma*:*Gemv*' > "$L/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests.log" | head -5 | tr '\n' ' ')"
pack
