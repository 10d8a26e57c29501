#!/usr/bin/env bash
# Session 48 call 1: the fused FFN (kernels/ffn_ln_sm90.cu, up + GELU-erf + down + residual LayerNorm in
# one kernel). Its tests and the GEMM + LayerNorm kernel's (shared epilogue) first; on a failure, stop.
# Then MiniLM end to end: fused with turns (default), fused without turns, unfused (two rounds); the
# per-thunk times; the default encoder bench beside the PyTorch peer (eager, no mask, torch.compile).
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s48a/s48a.tar.xz "${1:?OUT}"
timeout 150 $R/rlx_gpu_tests --gtest_filter='FfnLn*:GemmLn*' > "$L/tests-focus.log" 2>&1
rc=$?
echo "focus tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$L/tests-focus.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|want|bad values|rror' "$L/tests-focus.log" | head -30
pack
[ $rc -eq 0 ] || exit 0
for round in 1 2; do
  for v in "RLX_CUDA_FUSE_FFN_LN=1 RLX_CUDA_FFN_ORDERED=1" "RLX_CUDA_FUSE_FFN_LN=1 RLX_CUDA_FFN_ORDERED=0" \
    RLX_CUDA_FUSE_FFN_LN=0; do
    for s in 256x128 256x32; do
      f="$L/minilm-$s-$(echo "$v" | tr ' =' '_-')-$round.log"
      env $v timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 --shape $s > "$f" 2>&1
      echo "minilm $s $v round $round rc=$? $(grep cuda-graphs "$f" | grep -oE '[0-9.]+ ms' | tr '\n' ' ')"
    done
  done
done
pack
for v in 1 0; do
  RLX_CUDA_FUSE_FFN_LN=$v RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench --graphs-only --model minilm-l6 \
    --shape 256x128 > "$L/report-f$v.log" 2>&1
  echo "report fuse=$v: $(grep -E 'measured' "$L/report-f$v.log" | grep -E 'ffn|gemm|layer_norm|matmul|qkv' | head -6 \
    | sed 's/  */ /g' | cut -c1-200 | tr '\n' '|')"
done
pack
for v in 1 0; do
  RLX_CUDA_FUSE_FFN_LN=$v timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert-f$v.log" 2>&1
  echo "bert fuse=$v rc=$? $(grep -E 'cuda-graphs' "$L/bert-f$v.log" | sed 's/  */ /g' | tr '\n' '|')"
done
pack
(cd bench && timeout 170 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'torch-' "$L/bert-torch.log" | sed 's/  */ /g' | tr '\n' '|')"
pack
