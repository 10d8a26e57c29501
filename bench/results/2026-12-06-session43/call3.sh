#!/usr/bin/env bash
# Session 43 call 3, the final tree (b9d88ad): full GPU suite and CUDA conformance; the staging kernel's
# register feeds (B) against the byte loop (A) in decode; encoders, their per-thunk report, and the torch peer.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s43/s43c.tar.xz "${1:?OUT}"
suites
for round in 1 2; do
  for v in A B; do
    f="$L/gen-io-$v-$round.log"
    timeout 60 $R/rlx_generate_bench_$v $G > "$f" 2>&1
    echo "gen io-$v round $round rc=$? $(val "$f")"
  done
done
pack
encoders
RLX_DISPATCH_REPORT=1 timeout 120 $R/rlx_bert_bench --shape 256x128 --graphs-only > "$L/report.log" 2>&1
echo "report rc=$?"; pack
timeout 240 python3 bench/bert_torch.py --compile > "$L/torch-bert.log" 2>&1
echo "torch rc=$? $(grep -v '^{' "$L/torch-bert.log" | tail -8 | tr '\n' '|')"
pack
