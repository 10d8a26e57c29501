#!/usr/bin/env bash
# Session 41 call 6: the decode prototype with the cached keys and values through the ring and, on every SM,
# dots over GemvUnit units; then the final tree: full rlx_gpu_tests, CUDA conformance, decode and encoder figures.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41g/s41g.tar.xz "${1:?OUT}"
for k in 96 160; do
  timeout 60 $R/rlx_decode_cluster_bench --keys $k --steps 50 > "$L/proto-keys$k.log" 2>&1; echo "keys $k rc=$?"; cat "$L/proto-keys$k.log"
done
pack
timeout 200 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
pack
timeout 60 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
pack
for round in 1 2; do
  f="$L/gen-$round.log"; timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1; echo "decode bf16 round $round rc=$? $(val "$f")"
done
f="$L/genf32.log"; timeout 60 $R/rlx_generate_bench --synthetic --device cuda > "$f" 2>&1; echo "decode f32/f16 rc=$? $(val "$f")"
pack
timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
pack
