#!/usr/bin/env bash
# Session 40 call: GEMV tails (RLX_CUDA_GEMV_ROPE, RLX_CUDA_GEMV_POST_NORM): tests + A/B, trace, encoder figures, full suite.
OUT=${1:?OUT}
cd "$(dirname "$0")/../.."
L=$(mktemp -d)
pack() { tar czf "$OUT/logs.tgz.tmp" -C "$L" . && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"; }
mkdir -p build/run && tar xJf build/carry-s40c/s40c.tar.xz -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
nvidia-smi --query-gpu=name --format=csv,noheader
val() { grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" | sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '; }
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
F='GemvTail.*:*TinyLlmGpu*:CudaQuantGemv.*:CudaQuantGather.*:QueuedRunsGpu.*:PoolNorm*:GemmLnSm90.*:AttentionGpu.*:Gemma*'
timeout 150 $R/rlx_gpu_tests --gtest_filter="$F" > "$L/tests-new.log" 2>&1
echo "new tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-new.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests-new.log" | head -8 | tr '\n' ' ')"
pack
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_ROPE=1" "RLX_CUDA_GEMV_ROPE=0" "RLX_CUDA_GEMV_POST_NORM=0" "RLX_CUDA_GEMV_ROPE=0 RLX_CUDA_GEMV_POST_NORM=0"; do
    f="$L/gen-$(echo $s | tr ' =' '_-')-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
for s in "RLX_CUDA_GEMV_ROPE=1" "RLX_CUDA_GEMV_ROPE=0 RLX_CUDA_GEMV_POST_NORM=0"; do
  f="$L/genf32-$(echo $s | tr ' =' '_-').log"
  env $s timeout 60 $R/rlx_generate_bench --synthetic --device cuda > "$f" 2>&1
  echo "f32/f16 $s rc=$? $(val "$f")"
done
pack
timeout 60 $R/rlx_decode_trace --synthetic --dtype bf16 --steps 64 > "$L/trace.log" 2>&1; echo "trace rc=$? $(sed -n 3,6p "$L/trace.log" | tr '\n' '|')"
RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_generate_bench $G > "$L/gen-report.log" 2>&1; echo "report rc=$? rope tails=$(grep -c '+ rope q' "$L/gen-report.log") norm tails=$(grep -c '+ x + rms_norm' "$L/gen-report.log")"
pack
timeout 200 $R/rlx_gpu_tests --gtest_filter="-$F" > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
pack
timeout 120 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
pack
timeout 150 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
pack
