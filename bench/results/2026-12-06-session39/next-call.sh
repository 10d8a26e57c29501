#!/usr/bin/env bash
# Session 39's call 3, prepared and not run (the session's device time ran out in failed starts).
# From main at or after 35a086a, on the development machine:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s39e/s39e.tar.xz $B/bench/rlx_bert_bench \
#     $B/bench/rlx_decode_bench $B/bench/rlx_generate_bench $B/tests/rlx_gpu_tests
#   cp bench/results/2026-12-06-session39/next-call.sh build/carry-s39e/call.sh
# then run `bash build/carry-s39e/call.sh "$OUT"` carrying build/carry-s39e (30 MB). It checks 85fa5e0 and 35a086a
# (host-only lowering changes) on the tiny models, pooling, GEMM + LN and attention tests, times Gemma's Q6_K ffn_down (640 x 2048) on the
# streaming kernel (default, 1 MB+) against the unit kernel (RLX_CUDA_GEMV_STREAM=0) end to end and alone,
# and takes the H200's encoder figures. ~150 s.
# Session 39, call 3: H200 figures for the encoders and the decode kernels, and the streaming GEMV for
# Gemma's Q6_K ffn_down (640 x 2048) against the unit kernel on the current tree.
OUT=${1:?OUT}
cd "$(dirname "$0")/../.."
L=$(mktemp -d)
pack() { tar czf "$OUT/logs.tgz.tmp" -C "$L" . && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"; }
mkdir -p build/run && tar xJf build/carry-s39e/s39e.tar.xz -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
nvidia-smi --query-gpu=name --format=csv,noheader
val() { grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" | sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '; }
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
timeout 120 $R/rlx_gpu_tests --gtest_filter='*TinyLlmGpu*:CudaQuantGather.*:QueuedRunsGpu.*:PoolNorm*:GemmLnSm90.*:AttentionGpu.*' > "$L/tests-final.log" 2>&1
echo "final-tree tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-final.log" | tr '\n' ' ')"
pack
for round in 1 2; do
  for s in "RLX_CUDA_GEMV_STREAM=auto" "RLX_CUDA_GEMV_STREAM=0"; do
    f="$L/gen-${s//=/-}-$round.log"
    env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "$s round $round rc=$? $(val "$f")"
  done
done
pack
for s in auto 0; do
  RLX_CUDA_GEMV_STREAM=$s timeout 60 $R/rlx_decode_bench --keys 16,128,160,256,1024 > "$L/decode-bench-stream-$s.log" 2>&1
  echo "decode_bench stream=$s rc=$? $(grep -vE '^\{' "$L/decode-bench-stream-$s.log" | tail -n +4 | awk '{print $(NF-1)}' | tr '\n' ' ')"
done
pack
timeout 150 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
pack
