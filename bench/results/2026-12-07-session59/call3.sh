#!/usr/bin/env bash
# Session 59, call 3 (~250 s): the tree with the GEMM lending, the GEMM file and the GPU token budget
# on by default (5162c10). The GPU suite and the model tests (every CUDA model test now plans its GEMMs
# with lending on and the file on), then `rlx embed` over the 100k corpus (random-weight MiniLM) with
# no knob set: a cold cache folder, the same folder warm, and the all-off settings; outputs compared.
# Archive (not in git): B=build/sm90; scripts/carry_binaries.sh build/carry-s59/s59.tar.xz \
#   $B/cli/rlx $B/tests/rlx_gpu_tests $B/tests/rlx_model_tests; the skeleton as in session 58's call 1.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s59/s59.tar.xz "${1:?OUT}"
timeout 240 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -8
timeout 150 $R/rlx_model_tests > "$L/model-tests.log" 2>&1
echo "model tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/model-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$L/model-tests.log" | head -8
pack
random_model_corpus build/carry-s59/minilm-skeleton 100000
embed() {  # NAME CACHE_DIR SETTINGS...
  local name=$1 dir=$2 f="$L/embed-$1.log"
  shift 2
  env RLX_VERBOSE=1 RLX_CALIB_DIR=$dir "$@" timeout 120 $R/rlx embed --model $M \
    --device cuda --input $CORPUS --format npy -o /tmp/emb-$name.npy > /dev/null 2> "$f"
  echo "$name rc=$? $(grep -E 'rlx embed:|\] embed:' "$f" | sed 's/ on NVIDIA.*//' | tr '\n' ' ')"
}
rm -rf /tmp/d
embed default-cold /tmp/d
embed default-warm /tmp/d
embed all-off /tmp/off RLX_CUDA_GEMM_CACHE=0 RLX_CUDA_GEMM_TUNE_NEAR=0 RLX_EMBED_BATCH_TOKENS=0
embed default-warm-2 /tmp/d
python3 -c "
import numpy as np
a = np.load('/tmp/emb-all-off.npy')
for n in ('default-cold', 'default-warm', 'default-warm-2'):
    b = np.load(f'/tmp/emb-{n}.npy')
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    print(n, 'against all-off: bit-identical', bool((a == b).all()), 'min cosine', float(cos.min()))"
pack
