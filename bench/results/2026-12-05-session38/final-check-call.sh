#!/usr/bin/env bash
# Prepared, not run (the session's device time ran out in failed starts). From main (3d365bc or later):
#   scripts/carry_sm90.sh s38d rlx_gpu_tests rlx_generate_bench && cp this file build/carry-s38d/call.sh
#   git apply bench/results/2026-12-05-session37/rope-pre-wait-experiment.patch, build rlx_generate_bench,
#   pack it alone as build/carry-rope2/rope.tar.xz (tar cJf, the binary at the top), git checkout rope.cu
# then run `bash build/carry-s38d/call.sh "$OUT"` carrying build/carry-s38d and build/carry-rope2 (55 MB).
OUT=${1:?OUT}
cd "$(dirname "$0")/../.."
L=$(mktemp -d)
trap 'tar czf "$OUT/logs.tgz" -C "$L" .' EXIT
mkdir -p build/run build/rope && tar xJf build/carry-s38d/s38d.tar.xz -C build/run && tar xJf build/carry-rope2/rope.tar.xz -C build/rope
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
nvidia-smi --query-gpu=name --format=csv,noheader
val() { grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" | sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '; }
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
timeout 200 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "rlx_gpu_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | head -8 | tr '\n' ' ')"
grep -E "^\[  FAILED" "$L/gpu-tests.log" | head
for round in 1 2; do
  for s in 1 0; do
    f="$L/gen-ahead$s-$round.log"
    RLX_DECODE_RUN_AHEAD=$s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "ahead=$s round $round rc=$? $(val "$f")"
  done
done
# Session 37's rope probe (RLX_TMP_ROPE: 4 = main's order, 0 = the weight's load first, 8 = float sincos of
# the angle reduced in double, 3 = neither sincos nor the weight load: a floor, wrong values).
for round in 1; do
  for t in 4 0 8 3; do
    f="$L/rope-$t-$round.log"
    RLX_TMP_ROPE=$t timeout 60 build/rope/rlx_generate_bench $G > "$f" 2>&1
    echo "rope tmp=$t round $round rc=$? $(val "$f")"
  done
done
