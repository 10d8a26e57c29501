#!/usr/bin/env bash
# Session 57, call 3 (~150 s): where `rlx embed`'s time goes over the 100k corpus (call 2: 391
# batches in 21 shapes took 1.4-1.8 s, ~10x the device time the batches need): each compile's
# time (RLX_VERBOSE), the first batch of each shape, with the GEMM timing on first plan (default)
# and off (RLX_CUDA_GEMM_TUNE=0 RLX_CUDA_SM90_GEMM=1), with and without queued stretches.
# Archive: as call2.sh's header (s57.tar.xz with rlx, rlx_model_tests, rlx_bert_bench).
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s57/s57.tar.xz "${1:?OUT}"
random_model_corpus build/carry-s57/minilm-skeleton 100000
i=0
for round in 1 2; do
  for s in "RLX_EMBED_QUEUE_MIN_BATCHES=4" "RLX_EMBED_QUEUE_MIN_BATCHES=0" \
           "RLX_EMBED_QUEUE_MIN_BATCHES=4 RLX_CUDA_GEMM_TUNE=0 RLX_CUDA_SM90_GEMM=1"; do
    i=$((i + 1))
    f="$L/embed-$i-$round.log"
    echo "$s" > "$f"
    env RLX_VERBOSE=1 $s timeout 120 $R/rlx embed --model $M --device cuda --input $CORPUS --format npy \
      -o /tmp/emb-$i.npy > /dev/null 2>> "$f"
    echo "$s round $round rc=$? $(grep -E 'rlx embed:|\] embed:' "$f" | tr '\n' ' ')"
    echo "  compiles: $(grep -c 'compiled a spec' "$f"), ms: $(grep -oE 'compiled a spec.* in [0-9.]+ ms' "$f" |
      grep -oE '[0-9.]+ ms' | tr -d ' ms' | awk '{s+=$1} END {print s}')"
  done
done
grep 'compiled a spec' "$L/embed-1-1.log" | head -30
pack
