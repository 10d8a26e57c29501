# Sourced by a device call that runs binaries packed here by carry_binaries.sh
# (the call's script lives in a carried folder under build/, or in bench/results):
#   source scripts/carried_call.sh ARCHIVE OUT
# unpacks ARCHIVE into build/run and sets LD_LIBRARY_PATH, R (the binaries'
# folder), L (a fresh log folder) and G (the synthetic Gemma decode flags), and
# prints the GPU's name. It defines
#   pack      the logs so far as $OUT/logs.tgz (a call returns few loose files,
#             and what a timed-out call left must still come back);
#   val FILE  the decode and prefill tok/s of an rlx_generate_bench log.
ARCHIVE=${1:?usage: source scripts/carried_call.sh ARCHIVE OUT}
OUT=${2:?usage: source scripts/carried_call.sh ARCHIVE OUT}
L=$(mktemp -d)
pack() { tar czf "$OUT/logs.tgz.tmp" -C "$L" . && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"; }
val() {
  grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" |
    sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '
}
mkdir -p build/run && tar xJf "$ARCHIVE" -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
nvidia-smi --query-gpu=name --format=csv,noheader || true
