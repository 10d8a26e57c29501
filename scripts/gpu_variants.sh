#!/usr/bin/env bash
# Device call: A/B source variants of one file in a single call, rebuilding
# only what depends on it (a variant of one kernel file relinks in ~10 s).
#
#   scripts/gpu_variants.sh OUTDIR FILE COMMAND VARIANT...
#
# VARIANT: "base" (FILE as it is), or edits joined by '|': a sed expression
# applied to FILE, or a .patch file applied with git apply. COMMAND runs
# through bash after each build, with $B the build directory (gpu_env.sh);
# RLX_VARIANT_TARGETS names what to build (default rlx_quant_bench). FILE is
# restored at the end. Example:
#   scripts/gpu_variants.sh $OUT rlx/backends/cuda/kernels/qgemm_sm90.cu \
#     '$B/bench/rlx_quant_bench --only prefill' base 's/kStages = 4;/kStages = 6;/'
set -uo pipefail
OUT=${1:?usage: scripts/gpu_variants.sh OUTDIR FILE COMMAND VARIANT...}
FILE=${2:?file}
COMMAND=${3:?command}
shift 3
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
scripts/gpu_targets.sh ${RLX_VARIANT_TARGETS:-rlx_quant_bench} > "$OUT/variants-build.log" 2>&1 ||
  { echo "build failed"; tail -20 "$OUT/variants-build.log"; exit 1; }
saved=$(mktemp)
cp "$FILE" "$saved"
trap 'cp "$saved" "$FILE"; rm -f "$saved"' EXIT
for v in "$@"; do
  cp "$saved" "$FILE"
  ok=1
  if [ "$v" != base ]; then
    IFS='|' read -ra edits <<< "$v"
    for e in "${edits[@]}"; do
      if [[ $e == *.patch ]]; then git apply "$e" || ok=0; else sed -i "$e" "$FILE" || ok=0; fi
    done
    cmp -s "$saved" "$FILE" && { echo "== $v: changed nothing"; ok=0; }
  fi
  [ $ok = 1 ] || { echo "== $v: skipped"; continue; }
  t0=$(date +%s)
  ninja -C "$B" ${RLX_VARIANT_TARGETS:-rlx_quant_bench} > "$OUT/variants-build.log" 2>&1 ||
    { echo "== $v: build failed"; grep -E 'error' "$OUT/variants-build.log" | head -5; continue; }
  echo "== $v (build $(( $(date +%s) - t0 )) s)"
  B=$B bash -c "$COMMAND"
done
