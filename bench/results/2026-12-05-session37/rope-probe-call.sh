#!/usr/bin/env bash
# The device call session 37 prepared but could not run (no machine was lent).
# Apply rope-pre-wait-experiment.patch (RLX_TMP_ROPE bits: 1 no sincos, 2 no norm-weight load,
# 4 the old pre-wait order, 8 float sincos of the angle reduced in double), then
#   scripts/carry_sm90.sh l2 rlx_gpu_tests rlx_op_tests rlx_generate_bench rlx_decode_bench
#   cp bench/results/2026-12-05-session37/rope-probe-call.sh build/carry-l2/ab7.sh
# and run `bash build/carry-l2/ab7.sh "$OUT"` on the device carrying build/carry-l2.
# (The Env.SourcesUseOnlyDeclaredKnobs CPU test fails while the patch's RLX_TMP_ROPE is in.)
OUT=${1:?OUT}
cd "$(dirname "$0")/../.."
L=$(mktemp -d)
trap 'tar czf "$OUT/logs.tgz" -C "$L" .' EXIT
mkdir -p build/run && tar xJf build/carry-l2/l2.tar.xz -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
nvidia-smi --query-gpu=name --format=csv,noheader
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
val() { grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" | sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '; }
for t in 0 4 3 8; do
  RLX_TMP_ROPE=$t timeout 100 $R/rlx_decode_bench --keys 160 > "$L/decode-$t.log" 2>&1
  echo "decode_bench tmp=$t rc=$? $(grep -iE '^rope' "$L/decode-$t.log" | head -2 | tr '\n' '|')"
done
for round in 1 2 3; do
  for t in 0 4 1 2 3 8; do
    f="$L/gen-$t-$round.log"
    RLX_TMP_ROPE=$t timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1
    echo "tmp=$t round $round rc=$? $(val "$f")"
  done
done
timeout 240 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "rlx_gpu_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$L/gpu-tests.log" | head -12 | tr '\n' ' ')"
grep -E "^\[  FAILED" "$L/gpu-tests.log" | head
timeout 200 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$L/conformance.log" | head -6 | tr '\n' ' ')"
grep -E "^\[  FAILED" "$L/conformance.log" | head
