#!/usr/bin/env bash
# One device call: build + all tests (scripts/gpu_run.sh), then the benchmarks
# with their PyTorch peers measured in the same run, joined into one table.
#
#   scripts/gpu_session.sh OUTDIR
#
# Model files travel in .model/ (git-ignored): the all-MiniLM-L6-v2 folder as
# tar parts; when complete they are unpacked and RLX_MINILM_DIR points at them.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_session.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

if ls .model/minilm.tar.part* >/dev/null 2>&1; then
  mkdir -p /tmp/rlx-model
  if cat .model/minilm.tar.part* | tar x -C /tmp/rlx-model 2>/dev/null && [ -f /tmp/rlx-model/model/model.safetensors ]; then
    export RLX_MINILM_DIR=/tmp/rlx-model/model
    echo "minilm model at $RLX_MINILM_DIR" | tee -a "$OUT/summary.log"
  else
    echo "minilm model parts incomplete; model tests will skip" | tee -a "$OUT/summary.log"
  fi
fi

RLX_GPU_STEPS=${RLX_GPU_STEPS:-"build test bench"} scripts/gpu_run.sh "$OUT"
status=$?
BUILD=${RLX_GPU_BUILD:-build/gpu}

# PyTorch peers on the same GPU, same shapes.
for peer in attention kernels gemm bert; do
  [ -f "bench/${peer}_torch.py" ] || continue
  echo "==== torch peer $peer [$(date +%T)]" | tee -a "$OUT/summary.log"
  timeout 600 python3 "bench/${peer}_torch.py" > "$OUT/torch-$peer.log" 2>&1 || echo "torch $peer failed" | tee -a "$OUT/summary.log"
done
for pair in "attention:rlx_attention_bench" "kernels:rlx_kernels_bench" "gemm:rlx_gemm_bench" "bert:rlx_bert_bench"; do
  peer=${pair%%:*}
  bench=${pair##*:}
  if [ -f "$OUT/bench-$bench.log" ] && [ -f "$OUT/torch-$peer.log" ]; then
    python3 bench/compare.py "$OUT/bench-$bench.log" "$OUT/torch-$peer.log" > "$OUT/compare-$peer.txt" 2>&1
    cat "$OUT/compare-$peer.txt"
  fi
done
exit $status
