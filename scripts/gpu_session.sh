#!/usr/bin/env bash
# One device call: build + all tests (scripts/gpu_run.sh), then the benchmarks
# with their PyTorch peers measured in the same run, joined into one table.
#
#   scripts/gpu_session.sh OUTDIR
#
# Model files travel as tar parts (git-ignored .model/, or parts copied to
# /tmp/rlx-parts by earlier calls, since one call carries at most 64 MiB):
# bundle.tar.part* holds model/ (all-MiniLM-L6-v2) and the Gemma 3 270M GGUF.
# When complete they are unpacked and RLX_MINILM_DIR / RLX_GEMMA_GGUF point at them.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_session.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

MODELS=/tmp/rlx-models
if [ ! -f "$MODELS/.complete" ]; then
  parts=""
  for name in $(ls /tmp/rlx-parts .model 2>/dev/null | grep '^bundle\.tar\.part' | sort -u); do
    if [ -f "/tmp/rlx-parts/$name" ]; then parts="$parts /tmp/rlx-parts/$name"; else parts="$parts .model/$name"; fi
  done
  if [ -n "$parts" ]; then
    mkdir -p "$MODELS"
    if cat $parts | tar x -C "$MODELS" 2>/dev/null; then touch "$MODELS/.complete"; fi
  fi
fi
if [ -f "$MODELS/model/model.safetensors" ]; then export RLX_MINILM_DIR=$MODELS/model; fi
if [ -f "$MODELS/gemma-3-270m-q4_k_m.gguf" ]; then export RLX_GEMMA_GGUF=$MODELS/gemma-3-270m-q4_k_m.gguf; fi
echo "models: minilm=${RLX_MINILM_DIR:-absent} gemma=${RLX_GEMMA_GGUF:-absent}" | tee -a "$OUT/summary.log"

RLX_GPU_STEPS=${RLX_GPU_STEPS:-"build test bench"} scripts/gpu_run.sh "$OUT"
status=$?
BUILD=${RLX_GPU_BUILD:-build/gpu}

# PyTorch peers on the same GPU, same shapes (only in a run with the bench step).
[[ " ${RLX_GPU_STEPS:-build test bench} " == *" bench "* ]] || exit $status
for peer in attention kernels gemm bert quant cudnn; do
  [ -f "bench/${peer}_torch.py" ] || continue
  echo "==== torch peer $peer [$(date +%T)]" | tee -a "$OUT/summary.log"
  timeout 600 python3 "bench/${peer}_torch.py" > "$OUT/torch-$peer.log" 2>&1 || echo "torch $peer failed" | tee -a "$OUT/summary.log"
done
for pair in "attention:rlx_attention_bench" "kernels:rlx_kernels_bench" "gemm:rlx_gemm_bench" "bert:rlx_bert_bench" \
            "quant:rlx_quant_bench" "attention:rlx_cudnn_bench"; do
  peer=${pair%%:*}
  bench=${pair##*:}
  if [ -f "$OUT/bench-$bench.log" ] && [ -f "$OUT/torch-$peer.log" ]; then
    python3 bench/compare.py "$OUT/bench-$bench.log" "$OUT/torch-$peer.log" > "$OUT/compare-$peer.txt" 2>&1
    cat "$OUT/compare-$peer.txt"
  fi
done
exit $status
