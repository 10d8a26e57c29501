#!/usr/bin/env bash
# Session 48 call 4: the fused FFN with its f32 parameters placed before the slot counts (call 3's
# seven-slot variant put b1 at a 4-byte offset: misaligned float2 reads); its tests and the GEMM +
# LayerNorm's, then the ring at six slots (main) against seven (s7), forced on, two rounds.
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s48c/s48c.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='FfnLn*:GemmLn*' > "$L/tests-focus.log" 2>&1
echo "focus tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
pack
RLX_CUDA_FUSE_FFN_LN=1 bench_variants rlx_bert_bench "--graphs-only --model minilm-l6 --shape 256x128" \
  cuda-graphs s6 s7
