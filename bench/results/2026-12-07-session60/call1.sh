#!/usr/bin/env bash
# Session 60, call 1 (~4 min): the attention casts folded into the rope and decode-attention launches
# (RLX_CUDA_FUSE_ATTN_CASTS) and the top-k selection sampler (RLX_CUDA_SAMPLE_SELECT): their tests,
# then synthetic Gemma 3 270M decode with f32 activations over an f16 cache (rlx generate's default)
# greedy and sampled (the CLI's default sampling), each knob on and off, two rounds interleaved, and the
# bf16 / bf16 figure of earlier sessions; then the full GPU suite and the CUDA op conformance (suites).
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s60/s60.tar.xz \
#   $B/tests/rlx_gpu_tests $B/tests/rlx_op_tests $B/bench/rlx_generate_bench
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s60/s60.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='*Sample*:*TinyLlmGpu*:*AttentionGpu.Decode*:*Rope*:*Gemma*' \
  > "$L/focused-tests.log" 2>&1
echo "focused tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/focused-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/focused-tests.log" | head -8
pack
F32="--synthetic --device cuda --dtype f32 --kv-dtype f16"
gen() {  # NAME FLAGS SETTINGS...
  local name=$1 flags=$2 f="$L/gen-$1.log"
  shift 2
  env "$@" timeout 90 $R/rlx_generate_bench $flags > "$f" 2>&1
  echo "$name rc=$? $(grep -oE '^decode .*: +[0-9.]+ tok/s' "$f" | sed 's/  */ /g') $(val "$f" | grep -oE 'prefill512 [0-9.]+')" \
    "$(grep -oE 'per decode token *: [0-9]+' "$f" | sed 's/  */ /g')"
}
for round in 1 2; do
  gen f32-folded-$round "$F32" RLX_CUDA_FUSE_ATTN_CASTS=1
  gen f32-apart-$round "$F32" RLX_CUDA_FUSE_ATTN_CASTS=0
  gen f32-sampled-select-$round "$F32 --sample" RLX_CUDA_SAMPLE_SELECT=1
  gen f32-sampled-sort-$round "$F32 --sample" RLX_CUDA_SAMPLE_SELECT=0
  pack
done
gen bf16-greedy "$G" RLX_CUDA_FUSE_ATTN_CASTS=1
gen bf16-sampled-select "$G --sample" RLX_CUDA_SAMPLE_SELECT=1
gen bf16-sampled-sort "$G --sample" RLX_CUDA_SAMPLE_SELECT=0
pack
suites
