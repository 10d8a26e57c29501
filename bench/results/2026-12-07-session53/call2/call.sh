#!/usr/bin/env bash
# Session 53 call 2: call 1's archive. The full GPU suite and the CUDA op conformance with
# RLX_CUDA_FUSE_FFN_LN=1 (what turning it on by default would need), the CPU tests on the device
# host's CPU, and a fresh decode trace.
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s53a/s53a.tar.xz "${1:?OUT}"
export RLX_CUDA_FUSE_FFN_LN=${FFN_LN:-1}
suites
unset RLX_CUDA_FUSE_FFN_LN
host_cpu_tests
timeout 120 $R/rlx_decode_trace --synthetic --steps 64 --dtype bf16 > "$L/trace.log" 2>&1
echo "trace rc=$? $(grep -E 'host wall|GPU span' "$L/trace.log" | tr '\n' ' ')"
pack
