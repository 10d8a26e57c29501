#!/usr/bin/env bash
# Session 41 call 7: the decode prototype's whole-GPU form with unit dots (lds_raw from shared memory),
# the GEMV tests after lds_raw moved to device/unit_smem.cuh, one decode figure.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41h/s41h.tar.xz "${1:?OUT}"
timeout 60 $R/rlx_decode_cluster_bench --keys 96 --steps 50 > "$L/proto-keys96.log" 2>&1; echo "rc=$?"; sed -n '/every SM/,$p' "$L/proto-keys96.log"
pack
timeout 100 $R/rlx_gpu_tests --gtest_filter='CudaQuantGemv*:*TinyLlmGpu*' > "$L/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \]' "$L/tests.log" | head -5 | tr '\n' ' ')"
pack
f="$L/gen.log"; timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1; echo "decode bf16 rc=$? $(val "$f")"
pack
