#!/usr/bin/env bash
# Session 49 call 2: the GEMM that adds the residual of the norm after it (RLX_CUDA_GEMM_RESIDUAL):
# its tests; BERT-base 256 x 128 and MiniLM 1 x 16 with it on and off, two rounds interleaved;
# MiniLM 256 x 128 with its two projections on the fused GEMM + LayerNorm kernel and on cuBLASLt with
# the residual (RLX_CUDA_FUSE_GEMM_LN=0); per-thunk reports; the full GPU suite and the CUDA op
# conformance; the default encoder bench beside the PyTorch peer.
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s49b/s49b.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_gpu_tests --gtest_filter='GemmResidual*:GemmLn*:FusionGpu*:Bert*' > "$L/tests-focus.log" 2>&1
echo "focus rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
pack
bench() {  # NAME SETTING MODEL SHAPE
  local f="$L/$3-$4-$1.log"
  env $2 timeout 60 $R/rlx_bert_bench --graphs-only --model $3 --shape $4 > "$f" 2>&1
  echo "$3 $4 $2 rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g' | head -1)"
}
for round in 1 2; do
  for fold in 1 0; do
    bench "fold$fold-$round" RLX_CUDA_GEMM_RESIDUAL=$fold bert-base 256x128
    bench "fold$fold-$round" RLX_CUDA_GEMM_RESIDUAL=$fold minilm-l6 1x16
  done
done
for fuse in 1 0; do bench "gemmln$fuse" RLX_CUDA_FUSE_GEMM_LN=$fuse minilm-l6 256x128; done
pack
bench report-fold1 RLX_DISPATCH_REPORT=1 bert-base 256x128
bench report-gemmln0 "RLX_DISPATCH_REPORT=1 RLX_CUDA_FUSE_GEMM_LN=0" minilm-l6 256x128
bench report-gemmln1 RLX_DISPATCH_REPORT=1 minilm-l6 256x128
pack
suites
encoders
(cd bench && timeout 170 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'torch-' "$L/bert-torch.log" | grep -v '^{' | sed 's/  */ /g' | tr '\n' '|')"
pack
