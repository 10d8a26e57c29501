#!/usr/bin/env bash
# Session 48 call 3: the final tree after the review (one launch helper for the sm90 kernels, the
# FFN lowering's knob checked first): the full GPU suite and the CUDA op conformance; the fused FFN
# (forced on) with its ring at six slots (main) and at seven (variant s7, F at most 1536), two rounds,
# to test whether weights in flight bound it; the default encoder bench beside the PyTorch peer.
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s48b/s48b.tar.xz "${1:?OUT}"
suites
RLX_CUDA_FUSE_FFN_LN=1 bench_variants rlx_bert_bench "--graphs-only --model minilm-l6 --shape 256x128" \
  cuda-graphs s6 s7
encoders
(cd bench && timeout 170 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'torch-' "$L/bert-torch.log" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
pack
