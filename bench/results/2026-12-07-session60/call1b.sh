#!/usr/bin/env bash
# Session 60, call 1b (~4 min, for the device time left): call 1's binaries after b780039 (the memory plan
# keeps a folded cast's inputs live). The full GPU suite first, then the decode A/Bs of call1.sh, one
# round each plus a second round of the f32 pair.
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s60/s60.tar.xz \
#   $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests $B/bench/rlx_generate_bench
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s60/s60.tar.xz "${1:?OUT}"
timeout 210 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -8
pack
F32="--synthetic --device cuda --dtype f32 --kv-dtype f16"
gen() {  # NAME FLAGS SETTINGS...
  local name=$1 flags=$2 f="$L/gen-$1.log"
  shift 2
  env "$@" timeout 60 $R/rlx_generate_bench $flags > "$f" 2>&1
  echo "$name rc=$? $(grep -oE '^decode .*: +[0-9.]+ tok/s' "$f" | sed 's/  */ /g') $(val "$f" | grep -oE 'prefill512 [0-9.]+')" \
    "$(grep -oE 'per decode token *: [0-9]+' "$f" | sed 's/  */ /g')"
}
gen f32-folded-1 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=1
gen f32-apart-1 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=0
gen f32-sampled-select "$F32 --sample" RLX_CUDA_SAMPLE_SELECT=1
gen f32-sampled-sort "$F32 --sample" RLX_CUDA_SAMPLE_SELECT=0
gen bf16-greedy "$G" RLX_CUDA_FUSE_ATTN_CASTS=1
gen bf16-sampled-select "$G --sample" RLX_CUDA_SAMPLE_SELECT=1
gen f32-folded-2 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=1
gen f32-apart-2 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=0
pack
