#!/usr/bin/env bash
# Device call, step 1 of 2: configure + build for sm_90a, then the GPU tests:
# the CUDA half of the op conformance suite, the kernel and attention tests,
# and the model tests. Logs under OUTDIR. Step 2 is scripts/gpu_bench.sh.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_quick.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
RLX_GPU_STEPS=build scripts/gpu_run.sh "$OUT" || grep -E "error" "$OUT/build.log" | head -20
B=${RLX_GPU_BUILD:-build/gpu}
export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:$PWD/.deps/root/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
run() { local name=$1; shift; timeout 300 "$@" > "$OUT/$name.log" 2>&1; echo "$name: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$OUT/$name.log" | tr '\n' ' ')"; }
run gpu_tests "$B/tests/rlx_gpu_tests"
run conformance_cuda "$B/tests/rlx_op_tests" --gtest_filter='*cuda*'
run model_tests "$B/tests/rlx_model_tests"
grep -E "^\[  FAILED  \]" "$OUT"/*.log | head -40
tail -25 "$OUT/conformance_cuda.log"
