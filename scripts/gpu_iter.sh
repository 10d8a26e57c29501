#!/usr/bin/env bash
# One device call for an iteration: unpack carried model parts (see
# scripts/gpu_session.sh), build only what the steps need, run the steps.
#
#   scripts/gpu_iter.sh OUTDIR STEP...
#
# Steps: tests (rlx_gpu_tests, RLX_GT_FILTER), load (GPU tests while another process loops the
# calibration tests: RLX_LOAD_FILTER, six runs), conformance (CUDA op cases),
# gputests (ctest -L gpu), models (model parity tests), gen (Gemma decode and
# prefill, bf16), genab (A/B of env settings, RLX_GEN_AB), attn (rlx_attention_bench, A/B over RLX_ATTN_AB),
# bertab (MiniLM/BERT-base 256x128 A/B over RLX_BERT_AB), quant (rlx_quant_bench gemv + torch peer),
# prefill (rlx_quant_bench prefill + torch peer), trace (rlx_decode_trace: CUPTI timeline of
# Gemma decode steps; gen, genab and trace use a synthetic stand-in without the file), decode (rlx_decode_bench: a Gemma
# decode layer's kernels one at a time, no model needed; RLX_DECODE_KEYS=96,160,... sets the
# attention rows' key counts), sync (rlx_grid_sync_bench: grid barrier latency), minilm / bert
# (rlx_bert_bench + torch peer), report (their per-thunk times), gemm (rlx_gemm_bench: cuBLASLt and rlx's sm90
# kernels + torch.matmul peer), gemmab (square GEMMs: tuned, untuned and torch, twice), fft (rlx_fft_bench + torch.fft peer), sanitize (memcheck), ncu (decode kernels), ncuattn (the D = 32
# attention kernel's instruction mix and source counters), ncugemm (the same for the GELU-erf
# ping-pong GEMM at MiniLM's FFN up), ncugemmln (MiniLM's FFN down: the fused GEMM + LayerNorm kernel
# against cuBLASLt then the norm kernel), ncupersist (the persistent decode kernel's warp stall reasons),
# serve (rlx serve on the GPU under bench/serve_bench.py).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_iter.sh OUTDIR STEP...}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

MODELS=/tmp/rlx-models
if [ ! -f "$MODELS/.complete" ] && ls /tmp/rlx-parts/bundle.tar.part* > /dev/null 2>&1; then
  mkdir -p "$MODELS"
  cat /tmp/rlx-parts/bundle.tar.part* | tar x -C "$MODELS" && touch "$MODELS/.complete"
fi
source scripts/gpu_env.sh
echo "models: minilm=${RLX_MINILM_DIR:-absent} gemma=${RLX_GEMMA_GGUF:-absent}"
# Without the Gemma file, gen / genab / trace time a stand-in with its tensor
# types and shapes and random weights (bench/synthetic_gemma.h): same kernels
# and bytes per token, so no upload is needed to iterate on decode speed.
GEMMA=${RLX_GEMMA_GGUF:---synthetic}

t0=$(date +%s)
scripts/gpu_targets.sh rlx_gpu_tests rlx_op_tests rlx_model_tests rlx rlx_quant_bench rlx_generate_bench \
  rlx_bert_bench rlx_attention_bench rlx_decode_bench rlx_grid_sync_bench rlx_gemm_bench rlx_kernels_bench \
  rlx_fft_bench > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

# A/B steps: "base" runs a command as it is, VAR=VAL runs it with that setting;
# setting_slug names a setting's log file.
with_setting() { local setting=$1; shift; if [ "$setting" = base ]; then "$@"; else env "$setting" "$@"; fi; }
setting_slug() { echo "$1" | tr -c 'A-Za-z0-9_\n' '-'; }
summary() { grep -E '^\[  (PASSED|FAILED)  \]|tests? (passed|failed)|ERROR SUMMARY' "$1" | tr '\n' ' '; }
for step in "$@"; do
  echo "==== $step [$(date +%T)]"
  case $step in
    tests)
      timeout 300 "$B/tests/rlx_gpu_tests" --gtest_filter="${RLX_GT_FILTER:-*}" > "$OUT/tests.log" 2>&1
      echo "rc=$? $(summary "$OUT/tests.log")"; grep -E "^\[  FAILED" "$OUT/tests.log" | head -20 ;;
    load)  # GPU tests beside another GPU process: calibration tests looping in the background
      ( while :; do "$B/tests/rlx_gpu_tests" --gtest_filter='CalibrationGpu.*' > /dev/null 2>&1; done ) &
      loader=$!
      sleep 2
      for i in 1 2 3 4 5 6; do
        timeout 120 "$B/tests/rlx_gpu_tests" --gtest_filter="${RLX_LOAD_FILTER:-Cudnn.AttentionMatchesCpuAndThunkPath:CudaGraphs.*}" \
          > "$OUT/load-$i.log" 2>&1
        echo "under load, run $i: rc=$? $(summary "$OUT/load-$i.log")"; grep -E "^\[  FAILED" "$OUT/load-$i.log" | head -5
      done
      kill $loader 2>/dev/null; wait $loader 2>/dev/null ;;
    conformance)
      timeout 300 "$B/tests/rlx_op_tests" --gtest_filter='*cuda*' > "$OUT/conformance.log" 2>&1
      echo "rc=$? $(summary "$OUT/conformance.log")"; grep -E "^\[  FAILED" "$OUT/conformance.log" | head -20 ;;
    gputests)
      cmake --build "$B" -j16 > "$OUT/build-all.log" 2>&1 || { echo "full build failed"; tail -20 "$OUT/build-all.log"; }
      (cd "$B" && timeout 540 ctest -L gpu --output-on-failure) > "$OUT/ctest-gpu.log" 2>&1
      echo "rc=$?"; grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$OUT/ctest-gpu.log" | head -20 ;;
    models)
      timeout 300 "$B/tests/rlx_model_tests" > "$OUT/models.log" 2>&1
      echo "rc=$? $(summary "$OUT/models.log")"; grep -E "^\[  FAILED" "$OUT/models.log" | head -20 ;;
    gen)
      for i in 1 2; do
        timeout 120 "$B/bench/rlx_generate_bench" $GEMMA --device cuda --dtype bf16 --kv-dtype bf16 \
          > "$OUT/gen-$i.log" 2>&1; echo "rc=$?"; grep -E "tok/s|kernels" "$OUT/gen-$i.log" | tail -6
      done ;;
    genab)  # RLX_GEN_AB="base RLX_X=1 ...": decode/prefill under each setting, interleaved, 2 rounds
      for round in 1 2; do
        for setting in ${RLX_GEN_AB:-base}; do
          with_setting "$setting" timeout 120 "$B/bench/rlx_generate_bench" $GEMMA \
            --device cuda --dtype bf16 --kv-dtype bf16 > "$OUT/genab.log" 2>&1
          echo "$setting round $round rc=$? $(grep -oE '"case": "gemma3_270m_q4km(_synthetic)?_(decode|prefill512)_tok_s", "value": [0-9.]+' "$OUT/genab.log" | sed 's/.*_\(decode\|prefill512\)_tok_s", "value"/\1/' | tr '\n' ' ')"
        done
      done ;;
    quant)
      timeout 200 "$B/bench/rlx_quant_bench" --only gemv ${RLX_QUANT_TYPES:+--types $RLX_QUANT_TYPES} \
        > "$OUT/quant.log" 2>&1; echo "rc=$?"; grep -v '^{' "$OUT/quant.log" | tail -60
      timeout 200 python3 bench/quant_torch.py > "$OUT/torch-quant.log" 2>&1; echo "torch rc=$?"
      grep -v '^{' "$OUT/torch-quant.log" | tail -20 ;;
    prefill)  # the m = 512 quantized prefill GEMM (RLX_QUANT_TYPES) + torch f16 matmul
      timeout 300 "$B/bench/rlx_quant_bench" --only prefill ${RLX_QUANT_TYPES:+--types $RLX_QUANT_TYPES} \
        > "$OUT/prefill.log" 2>&1; echo "rc=$?"; grep -v '^{' "$OUT/prefill.log" | tail -70
      timeout 200 python3 bench/quant_torch.py > "$OUT/torch-quant.log" 2>&1; echo "torch rc=$?"
      grep -E 'prefill' "$OUT/torch-quant.log" | grep -v '^{' ;;
    trace)  # CUPTI trace of Gemma decode steps (the file, else the synthetic stand-in): wall vs GPU span, every node of a step
      scripts/gpu_targets.sh rlx_decode_trace > "$OUT/trace-build.log" 2>&1 || { echo "trace build failed"; tail -5 "$OUT/trace-build.log"; continue; }
      timeout 120 "$B/bench/rlx_decode_trace" $GEMMA > "$OUT/trace.log" 2>&1; echo "rc=$?"; head -8 "$OUT/trace.log"
      grep -A25 "^per name" "$OUT/trace.log" ;;
    sync)  # grid barrier and barrier + exchange latency (the persistent decode kernel's floor)
      timeout 60 "$B/bench/rlx_grid_sync_bench" > "$OUT/sync.log" 2>&1; echo "rc=$?"; cat "$OUT/sync.log" ;;
    decode)  # a Gemma 3 270M decode layer's kernels, chained graph launches, beside an empty kernel
      timeout 200 "$B/bench/rlx_decode_bench" ${RLX_DECODE_KEYS:+--keys $RLX_DECODE_KEYS} > "$OUT/decode.log" 2>&1
      echo "rc=$?"; grep -v '^{' "$OUT/decode.log" ;;
    attn)  # rlx_attention_bench under each RLX_ATTN_AB setting ("base VAR=VAL ..."; default base)
      for setting in ${RLX_ATTN_AB:-base}; do
        log="$OUT/attn-$(setting_slug "$setting").log"
        with_setting "$setting" timeout 200 "$B/bench/rlx_attention_bench" > "$log" 2>&1
        echo "$setting rc=$?"; grep -E "^embed" "$log"
      done ;;
    bertab)  # RLX_BERT_AB="base VAR=VAL ...": MiniLM and BERT-base 256x128 (graphs) under each setting, 2 rounds
      for round in 1 2; do
        for setting in ${RLX_BERT_AB:-base}; do
          log="$OUT/bertab-$(setting_slug "$setting")-$round.log"
          with_setting "$setting" timeout 200 "$B/bench/rlx_bert_bench" --shape 256x128 \
            --graphs-only > "$log" 2>&1
          echo "$setting round $round rc=$? $(grep -E '^(minilm|bert)' "$log" | awk '{print $1, $4}' | tr '\n' ' ')"
        done
      done ;;
    report)  # per-thunk times (RLX_DISPATCH_REPORT) of MiniLM and BERT-base at 256x128, CUDA graphs
      RLX_DISPATCH_REPORT=1 timeout 200 "$B/bench/rlx_bert_bench" --shape 256x128 --graphs-only > "$OUT/report.log" 2>&1
      echo "rc=$?"; grep -E '^(minilm|bert)' "$OUT/report.log" ;;
    minilm|bert)
      timeout 200 "$B/bench/rlx_bert_bench" > "$OUT/bert.log" 2>&1; echo "rc=$?"; grep -v '^{' "$OUT/bert.log" | tail -30
      timeout 300 python3 bench/bert_torch.py --compile > "$OUT/torch-bert.log" 2>&1; echo "torch rc=$?"
      python3 bench/compare.py "$OUT/bert.log" "$OUT/torch-bert.log" 2>&1 | tail -30 ;;
    gemm)  # cuBLASLt on square and BERT shapes, rlx's sm90 kernels against it, torch.matmul peer
      timeout 300 "$B/bench/rlx_gemm_bench" > "$OUT/gemm.log" 2>&1; echo "rc=$?"
      grep -v '^{' "$OUT/gemm.log" | grep -vE '^  .* rank [0-9]+ ' | tail -45
      timeout 200 python3 bench/gemm_torch.py > "$OUT/torch-gemm.log" 2>&1; echo "torch rc=$?"
      grep -v '^{' "$OUT/torch-gemm.log" | tail -12 ;;
    gemmab)  # the square shapes: the engine's tuned choice, cuBLASLt's first choice (RLX_CUDA_GEMM_TUNE=0), torch, twice
      for round in 1 2; do
        for setting in base RLX_CUDA_GEMM_TUNE=0; do
          log="$OUT/gemmab-$(setting_slug "$setting")-$round.log"
          with_setting "$setting" timeout 200 "$B/bench/rlx_gemm_bench" --only square > "$log" 2>&1
          echo "$setting round $round rc=$?"; grep -v '^{' "$log" | grep -vE '^  .* rank [0-9]+ ' | head -24
        done
        timeout 200 python3 bench/gemm_torch.py > "$OUT/gemmab-torch-$round.log" 2>&1
        echo "torch round $round rc=$?"; grep -v '^{' "$OUT/gemmab-torch-$round.log" | grep -E '8192|4096' | head -6
      done ;;
    fft)  # Fourier transforms through the runtime (cuFFT) + torch.fft peer
      timeout 300 "$B/bench/rlx_fft_bench" > "$OUT/fft.log" 2>&1; echo "rc=$?"
      grep -v '^{' "$OUT/fft.log" | tail -12
      timeout 200 python3 bench/fft_torch.py > "$OUT/torch-fft.log" 2>&1; echo "torch rc=$?"
      grep -v '^{' "$OUT/torch-fft.log" | tail -10 ;;
    sanitize)
      RLX_SANITIZE_LIMIT=${RLX_SANITIZE_LIMIT:-150} scripts/gpu_sanitize.sh "$OUT/sanitize" memcheck ;;
    ncu)
      scripts/gpu_profile.sh "$OUT/ncu" > "$OUT/ncu.log" 2>&1; echo "rc=$?"; tail -40 "$OUT/ncu.log" ;;
    ncuattn)  # the D = 32 attention kernel: instruction mix and source counters (gpu_profile.sh attention)
      scripts/gpu_profile.sh "$OUT/ncu" attention > "$OUT/ncu.log" 2>&1; echo "rc=$?"
      grep -A40 -E "Section: (Instruction Statistics|Source Counters)" "$OUT/ncu/ncu-attention-d32.txt" | head -90 ;;
    ncugemm)  # the GELU-erf ping-pong GEMM at MiniLM's FFN up: stalls, instruction mix, source counters
      scripts/gpu_profile.sh "$OUT/ncu" gemm > "$OUT/ncu.log" 2>&1; echo "rc=$?"
      grep -A40 -E "Section: (Warp State Statistics|Instruction Statistics|Source Counters)" "$OUT/ncu/ncu-gemm-gelu.txt" | head -120 ;;
    serve)  # rlx serve on the GPU under bench/serve_bench.py (MiniLM; 64 clients x 20 requests x 4 and x 32 texts)
      [ -n "${RLX_MINILM_DIR:-}" ] || { echo "serve: needs the MiniLM files (RLX_MINILM_DIR)"; continue; }
      for b in 4 32; do
        timeout 300 python3 bench/serve_bench.py --start-rlx "$B/cli/rlx" --serve-args "--device cuda --model $RLX_MINILM_DIR" \
          --clients 64 --requests 20 --batch $b > "$OUT/serve-$b.log" 2>&1; echo "rc=$?"; grep -v '^{' "$OUT/serve-$b.log" | tail -3
      done ;;
    ncupersist)  # the persistent decode kernel: warp stall reasons (instruction fetch or memory?)
      scripts/gpu_profile.sh "$OUT/ncu" persistent > "$OUT/ncu.log" 2>&1; echo "rc=$?"
      grep -E "Stall|stall|Warp Cycles|Issued|Duration|Registers|Instructions" "$OUT/ncu/ncu-persistent.txt" | head -60 ;;
    ncugemmln)  # MiniLM's FFN down fused and unfused: throughput, memory, warp states
      scripts/gpu_profile.sh "$OUT/ncu" gemmln > "$OUT/ncu.log" 2>&1; echo "rc=$?"
      for f in "$OUT"/ncu/ncu-gemm-ln-ffn2.txt "$OUT"/ncu/ncu-cublaslt-ln-ffn2.txt; do
        grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|L2 Hit|Eligible Warps|Issued Warp|Warp Cycles Per Issued|Registers|Cluster|Block Size|Grid Size" "$f" | head -60
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
