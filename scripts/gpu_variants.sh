#!/usr/bin/env bash
# Device call: A/B source variants in a single call, rebuilding only what
# depends on the edited files (a variant of one kernel file relinks in ~10 s).
#
#   scripts/gpu_variants.sh OUTDIR FILE COMMAND VARIANT...
#
# VARIANT: "base" (the tree as it is), or edits joined by '|': a sed
# expression applied to FILE, or a .patch file applied with git apply (it may
# touch any files, e.g. `git diff main BRANCH > x.patch`). Every file a
# variant edits is restored before the next one and at the end. COMMAND runs
# through bash after each build, with $B the build directory (gpu_env.sh);
# RLX_VARIANT_TARGETS names what to build (default rlx_quant_bench). Example:
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
backup=$(mktemp -d)
touched=()
save() {  # keeps the original of each file before its first edit
  for f in "$@"; do
    [ -e "$backup/$f" ] && continue
    mkdir -p "$backup/$(dirname "$f")"
    if [ -e "$f" ]; then cp "$f" "$backup/$f"; else : > "$backup/$f.absent"; fi
    touched+=("$f")
  done
}
restore() {
  for f in "${touched[@]}"; do
    if [ -e "$backup/$f.absent" ]; then rm -f "$f"; else cp "$backup/$f" "$f"; fi
  done
}
trap 'restore; rm -rf "$backup"' EXIT
for v in "$@"; do
  restore
  ok=1
  if [ "$v" != base ]; then
    IFS='|' read -ra edits <<< "$v"
    for e in "${edits[@]}"; do
      if [[ $e == *.patch ]]; then
        mapfile -t files < <(git apply --numstat "$e" | cut -f3)
        save "${files[@]}"
        git apply "$e" || ok=0
      else
        save "$FILE"
        before=$(md5sum < "$FILE")
        sed -i "$e" "$FILE" || ok=0
        [ "$before" = "$(md5sum < "$FILE")" ] && { echo "== $v: '$e' changed nothing"; ok=0; }
      fi
    done
  fi
  [ $ok = 1 ] || { echo "== $v: skipped"; continue; }
  t0=$(date +%s)
  ninja -C "$B" ${RLX_VARIANT_TARGETS:-rlx_quant_bench} > "$OUT/variants-build.log" 2>&1 ||
    { echo "== $v: build failed"; grep -E 'error' "$OUT/variants-build.log" | head -5; continue; }
  echo "== $v (build $(( $(date +%s) - t0 )) s)"
  B=$B bash -c "$COMMAND"
done
