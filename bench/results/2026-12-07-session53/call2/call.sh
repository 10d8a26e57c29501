#!/usr/bin/env bash
# Session 53 call 2, as run (H100, right after call 1 on the same warm machine, call 1's archive): the bf16
# CPU matmul table at 4 and 8 threads on the device host (call 1 had 2 and 16), the CPU kernel and runtime
# tests there, and a decode trace. (The suites under RLX_CUDA_FUSE_FFN_LN=1 planned here were not run:
# call 1 measured the fusion at parity again, so its default stays off.)
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s53a/s53a.tar.xz "${1:?OUT}" > /dev/null
for t in 4 8; do
  RLX_NUM_THREADS=$t timeout 60 $R/rlx_cpu_bench --bf16 --reps 7 > $L/cpu-bf16-$t.log 2>&1
  echo "threads=$t"; grep -E "^  [0-9M]" $L/cpu-bf16-$t.log
done
pack
host_cpu_tests
timeout 100 $R/rlx_decode_trace --synthetic --steps 64 --dtype bf16 > $L/trace.log 2>&1
echo "trace rc=$? $(grep -E 'host wall|GPU span' $L/trace.log | tr '\n' ' ')"
pack
