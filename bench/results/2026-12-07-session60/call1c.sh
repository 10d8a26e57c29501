#!/usr/bin/env bash
# Session 60, call 1c (~1 min, what the device time left allows): call 1b's binaries (b780039), the tests
# of the two changes and of the decode they touch, then the f32 / f16 decode A/B and sampled decode.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s60/s60.tar.xz "${1:?OUT}"
timeout 90 $R/rlx_gpu_tests --gtest_filter='*Sample*:*TinyLlmGpu*:*AttentionGpu.Decode*:*Rope*:*QueuedRuns*' \
  > "$L/focused-tests.log" 2>&1
echo "focused tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/focused-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/focused-tests.log" | head -8
pack
F32="--synthetic --device cuda --dtype f32 --kv-dtype f16"
gen() {  # NAME FLAGS SETTINGS...
  local name=$1 flags=$2 f="$L/gen-$1.log"
  shift 2
  env "$@" timeout 40 $R/rlx_generate_bench $flags > "$f" 2>&1
  echo "$name rc=$? $(grep -oE '^decode .*: +[0-9.]+ tok/s' "$f" | sed 's/  */ /g') $(val "$f" | grep -oE 'prefill512 [0-9.]+')" \
    "$(grep -oE 'per decode token *: [0-9]+' "$f" | sed 's/  */ /g')"
}
gen f32-folded-1 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=1
gen f32-apart-1 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=0
gen f32-sampled-select "$F32 --sample" RLX_CUDA_SAMPLE_SELECT=1
gen bf16-greedy "$G"
gen f32-folded-2 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=1
gen f32-apart-2 "$F32" RLX_CUDA_FUSE_ATTN_CASTS=0
gen bf16-sampled-select "$G --sample" RLX_CUDA_SAMPLE_SELECT=1
pack
