#!/usr/bin/env bash
# Session 47 call 4: the final tree (fused QKV projection + attention on by default): the CUDA op
# conformance, MiniLM and BERT-base end to end (fusion on, then off) beside the PyTorch peer
# (eager, no-mask, torch.compile), after the fusion tests (refactored test code). (The full GPU suite
# of this library code ran in call 3.)
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s47d/s47d.tar.xz "${1:?OUT}"
timeout 90 $R/rlx_gpu_tests --gtest_filter='QkvAttention*:GemmLn*' > "$L/tests-focus.log" 2>&1
echo "focus tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
timeout 90 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
pack
for f in 1 0; do
  RLX_CUDA_FUSE_QKV_ATTENTION=$f timeout 90 $R/rlx_bert_bench --graphs-only > "$L/bert-f$f.log" 2>&1
  echo "bert fuse=$f rc=$? $(grep -E 'cuda-graphs' "$L/bert-f$f.log" | sed 's/  */ /g' | tr '\n' '|')"
done
pack
(cd bench && timeout 160 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'torch-' "$L/bert-torch.log" | sed 's/  */ /g' | tr '\n' '|')"
pack
