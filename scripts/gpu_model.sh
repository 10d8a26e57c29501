#!/usr/bin/env bash
# Device call: build, unpack the MiniLM model (tar parts: one carried earlier
# into /tmp/rlx-parts, one in .model/), run the model parity tests on CUDA, the
# CUDA-graph replay test and `rlx embed` (compute-sanitizer: scripts/gpu_sanitize.sh).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_model.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
RLX_GPU_STEPS=build scripts/gpu_run.sh "$OUT" || grep -E "error" "$OUT/build.log" | head -20
B=${RLX_GPU_BUILD:-build/gpu}
export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:$PWD/.deps/root/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/rlx-model
cat /tmp/rlx-parts/minilm.tar.partaa .model/minilm.tar.partab 2>/dev/null | tar x -C /tmp/rlx-model && export RLX_MINILM_DIR=/tmp/rlx-model/model
echo "model: ${RLX_MINILM_DIR:-missing}"
run() { local name=$1; shift; timeout 240 "$@" > "$OUT/$name.log" 2>&1; echo "$name: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' "$OUT/$name.log" | tr '\n' ' ')"; }
run model_tests "$B/tests/rlx_model_tests"
run model_tests2 "$B/tests/rlx_model_tests"
run conformance_cuda "$B/tests/rlx_op_tests" --gtest_filter="*cuda*"
run gpu_tests "$B/tests/rlx_gpu_tests"
grep -h "minilm \]" "$OUT"/model_tests*.log
run graphs "$B/tests/rlx_gpu_tests" --gtest_filter='CudaGraphs.*'
echo "Hello world" | "$B/cli/rlx" embed --model "${RLX_MINILM_DIR:-}" --device cuda --input - > "$OUT/embed.jsonl" 2> "$OUT/embed.err"; echo "embed rc=$? $(head -c 120 "$OUT/embed.jsonl")"; cat "$OUT/embed.err"
grep -E "^\[  FAILED  \]" "$OUT"/*.log | head -20
timeout 120 "$B/bench/rlx_bert_bench" 2>&1 | grep -v "\"bench\""
