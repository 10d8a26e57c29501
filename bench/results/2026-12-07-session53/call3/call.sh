#!/usr/bin/env bash
# Session 53 call 3 (H100 host, as run): the bf16 CPU matmul table at 2-16 threads after the AMX kernel
# split short A's column blocks across threads as the VDPBF16PS kernel does. Archive, not in git:
#   scripts/carry_binaries.sh build/carry-s53b/s53b.tar.xz build/sm90/bench/rlx_cpu_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s53b/s53b.tar.xz "${1:?OUT}" > /dev/null
grep -m1 -E "model name" /proc/cpuinfo; nproc
for t in 2 4 8 16; do
  RLX_NUM_THREADS=$t timeout 60 $R/rlx_cpu_bench --bf16 --reps 7 > $L/cpu-bf16-$t.log 2>&1
  echo "threads=$t"; grep -E "^  [0-9M]" $L/cpu-bf16-$t.log
done
pack
