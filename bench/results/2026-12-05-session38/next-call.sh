#!/usr/bin/env bash
# The device call session 38 prepared (no machine was lent that session). From main at or after
# session 38's commits, on the development machine:
#   scripts/carry_sm90.sh s38 rlx_gpu_tests rlx_op_tests rlx_generate_bench rlx_decode_bench rlx_bert_bench
#   cp bench/results/2026-12-05-session38/next-call.sh build/carry-s38/
# then run `bash build/carry-s38/next-call.sh "$OUT"` on the device, carrying build/carry-s38.
# It checks the untested commits (queued runs and run-ahead decode; the input copy out of the graph;
# RLX_CUDA_DECODE_ATTN_TILES) and times them against their off switches in the same call.
OUT=${1:?OUT}
cd "$(dirname "$0")/../.."
L=$(mktemp -d)
trap 'tar czf "$OUT/logs.tgz" -C "$L" .' EXIT
mkdir -p build/run && tar xJf build/carry-s38/s38.tar.xz -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
nvidia-smi --query-gpu=name --format=csv,noheader
val() { grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" | sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '; }
# 1. Correctness first: every GPU test (QueuedRunsGpu.* and the 1-3 tile decode cases are new), the conformance.
timeout 300 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "rlx_gpu_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$L/gpu-tests.log" | head -12 | tr '\n' ' ')"
grep -E "^\[  FAILED" "$L/gpu-tests.log" | head
timeout 200 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$L/conformance.log" | head -6 | tr '\n' ' ')"
# 2. Decode: run-ahead on (default) and off, tiles 1 (default) and 2; three rounds interleaved.
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
for round in 1 2 3; do
  for s in base RLX_DECODE_RUN_AHEAD=0 RLX_CUDA_DECODE_ATTN_TILES=2; do
    f="$L/gen-${s//=/-}-$round.log"
    if [ "$s" = base ]; then timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    else env "$s" timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1; fi
    echo "$s round $round rc=$? $(val "$f")"
  done
done
for s in base RLX_DECODE_RUN_AHEAD=0; do  # the CLI's default precision (f32 compute, f16 cache)
  f="$L/genf32-${s//=/-}.log"
  if [ "$s" = base ]; then timeout 60 $R/rlx_generate_bench --synthetic --device cuda > "$f" 2>&1
  else env "$s" timeout 60 $R/rlx_generate_bench --synthetic --device cuda > "$f" 2>&1; fi
  echo "f32/f16 $s rc=$? $(val "$f")"
done
for t in 1 2 3; do
  RLX_CUDA_DECODE_ATTN_TILES=$t timeout 100 $R/rlx_decode_bench --keys 128,160,200,256,384,1024 > "$L/decode-tiles$t.log" 2>&1
  echo "decode_bench tiles=$t rc=$? $(grep -E '^decode attention' "$L/decode-tiles$t.log" | awk '{print $3, $(NF-1)}' | tr '\n' '|')"
done
# 3. The encoders (the input copy now runs before the graph, not in it): MiniLM 1x16 was 0.164 ms, 256x128 2.10-2.19.
timeout 200 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
