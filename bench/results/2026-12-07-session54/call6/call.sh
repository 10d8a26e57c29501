#!/usr/bin/env bash
# Session 54 call 6, on an H200 (needs_h200): the final tree's GPU suite and conformance, the fp8
# GEMM / fp8 linear rows beside torch, the encoders and decode (synthetic Gemma 3 270M); trimmed
# to fit the device time left after a failed start. Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s54f/s54f.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_gemm_bench $B/bench/rlx_bert_bench $B/bench/rlx_generate_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s54f/s54f.tar.xz "${1:?OUT}"
suites
timeout 150 $R/rlx_gemm_bench --only fp8 > "$L/gemm-fp8.log" 2>&1
echo "gemm fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8.log"
(cd bench && timeout 120 python3 gemm_torch.py --only fp8) > "$L/gemm-fp8-torch.log" 2>&1
echo "torch fp8 rc=$?"; grep -v '^{' "$L/gemm-fp8-torch.log"
pack
encoders
pack
for round in 1 2; do
  timeout 60 $R/rlx_generate_bench $G > "$L/gen-$round.log" 2>&1
  echo "gen round $round rc=$? $(val "$L/gen-$round.log")"
done
pack
