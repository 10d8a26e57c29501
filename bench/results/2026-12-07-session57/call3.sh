#!/usr/bin/env bash
# Session 57, call 3 (~200 s): where `rlx embed`'s time goes over the 100k corpus (call 2: 391
# batches in 21 shapes took 1.4-1.8 s, ~10x the device time of their tokens), and the GEMM
# timings kept on disk (RLX_CUDA_GEMM_CACHE=1, off by default until this runs): each compile's time (RLX_VERBOSE), a cold cache
# folder, then the same folder warm, warm with queued stretches (RLX_EMBED_QUEUE_MIN_BATCHES=4),
# and no GEMM timing at all; the two GemmEngine tests of the file and of the timing.
# Then (unless ROUNDS=1) the encoders and synthetic decode on the final tree.
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s57/s57.tar.xz \
#   $B/cli/rlx $B/tests/rlx_gpu_tests $B/bench/rlx_bert_bench $B/bench/rlx_generate_bench;
# the skeleton as in call2.sh's header.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s57/s57.tar.xz "${1:?OUT}"
timeout 100 $R/rlx_gpu_tests --gtest_filter='CalibrationGpu.GemmTiming*:CalibrationGpu.GemmTuning*' \
  > "$L/gemm-cache-tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|tuned choice' "$L/gemm-cache-tests.log" | tr '\n' ' ')"
grep -E 'Failure|Expected|Which is' "$L/gemm-cache-tests.log" | head -6
random_model_corpus build/carry-s57/minilm-skeleton 100000
embed() {  # NAME CACHE_DIR SETTINGS...
  local name=$1 dir=$2 f="$L/embed-$1.log"
  shift 2
  env RLX_VERBOSE=1 RLX_CALIB_DIR=$dir RLX_CUDA_GEMM_CACHE=1 "$@" timeout 120 $R/rlx embed --model $M --device cuda --input $CORPUS \
    --format npy -o /tmp/emb-$name.npy > /dev/null 2> "$f"
  echo "$name rc=$? $(grep -E 'rlx embed:|\] embed:' "$f" | sed 's/ on NVIDIA.*//' | tr '\n' ' ')"
  echo "  compiles: $(grep -c 'compiled a spec' "$f"), ms: $(grep -oE 'compiled a spec.* in [0-9.]+ ms' "$f" |
    grep -oE '[0-9.]+ ms' | tr -d ' ms' | awk '{s+=$1} END {print s}')"
}
for round in $(seq 1 "${ROUNDS:-2}"); do  # ROUNDS=1 when device time is short
  d=/tmp/cache-$round
  rm -rf $d
  embed cold-$round $d
  embed warm-$round $d
  embed warm-queue-$round $d RLX_EMBED_QUEUE_MIN_BATCHES=4
  embed untimed-$round /tmp/cache-none-$round RLX_CUDA_GEMM_TUNE=0 RLX_CUDA_SM90_GEMM=1
  ls -la $d
done
grep 'compiled a spec' "$L/embed-cold-1.log" | head -24
grep 'compiled a spec' "$L/embed-warm-1.log" | head -24
python3 -c "
import numpy as np
a = np.load('/tmp/emb-cold-1.npy')
import os
for n in ('warm-1', 'warm-queue-1', 'cold-2'):
    if not os.path.exists(f'/tmp/emb-{n}.npy'):
        continue
    b = np.load(f'/tmp/emb-{n}.npy')
    print(n, 'bit-identical to cold-1:', bool((a.view(np.uint32) == b.view(np.uint32)).all()))"
pack
if [ "${ROUNDS:-2}" -ge 2 ]; then
  encoders
  timeout 40 $R/rlx_generate_bench $G > "$L/gen.log" 2>&1
  echo "gen rc=$? $(val "$L/gen.log")"
  pack
fi
