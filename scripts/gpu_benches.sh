#!/usr/bin/env bash
# Device call: run the named benchmarks (default: all) from an existing
# build, each with its PyTorch peer when one exists, logs under OUTDIR.
#   scripts/gpu_benches.sh OUTDIR [bench...]   e.g. quant generate bert
set -uo pipefail
OUT=${1:?usage: scripts/gpu_benches.sh OUTDIR [bench...]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
names=${*:-"gemm kernels attention cudnn bert quant generate"}
for n in $names; do
  exe=$B/bench/rlx_${n}_bench
  [ -x "$exe" ] || { echo "no $exe"; continue; }
  echo "==== $n [$(date +%T)]"
  if [ "$n" = generate ]; then  # the Gemma file, f32 and bf16 compute
    timeout 300 "$exe" ${RLX_GEMMA_GGUF:-} --device cuda > "$OUT/rlx-$n.log" 2>&1; echo "rc=$?"
    timeout 300 "$exe" ${RLX_GEMMA_GGUF:-} --device cuda --dtype bf16 --kv-dtype bf16 >> "$OUT/rlx-$n.log" 2>&1; echo "rc=$?"
  else
    timeout 300 "$exe" > "$OUT/rlx-$n.log" 2>&1; echo "rc=$?"
  fi
  grep -v '^{' "$OUT/rlx-$n.log" | tail -40
  peer=bench/${n}_torch.py
  [ "$n" = cudnn ] && peer=bench/attention_torch.py
  if [ -f "$peer" ] && [ "${RLX_NO_PEERS:-0}" != 1 ]; then
    timeout 300 python3 "$peer" $([ "$n" = bert ] && echo --compile) > "$OUT/torch-$n.log" 2>&1
    python3 bench/compare.py "$OUT/rlx-$n.log" "$OUT/torch-$n.log" > "$OUT/compare-$n.txt" 2>&1 && cat "$OUT/compare-$n.txt"
  fi
done
