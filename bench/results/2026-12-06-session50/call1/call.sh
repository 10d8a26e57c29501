#!/usr/bin/env bash
# Session 50 call 1: main at fe0e992 (session 49's unrun commits, the LN kernels' column-block dispatch
# through one helper, the CPU arena pool and AMX bf16 matmuls) on whatever GPU is lent:
# the full GPU suite and CUDA conformance, the encoders beside the PyTorch peer (issue 5), synthetic
# Gemma decode (issue 6), the fused GEMVs beside torch f16 (issue 4). Archive, not in git:
#   B=build/sm90; scripts/carry_binaries.sh build/carry-s50a/s50a.tar.xz $B/tests/rlx_gpu_tests \
#     $B/tests/rlx_op_tests $B/bench/rlx_bert_bench $B/bench/rlx_generate_bench $B/bench/rlx_quant_bench
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s50a/s50a.tar.xz "${1:?OUT}"
suites
encoders
(cd bench && timeout 170 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
echo "torch rc=$? $(grep -E 'MiniLM|BERT|bert' "$L/bert-torch.log" | grep -v '^{' | head -8 | tr '\n' '|')"
pack
gen_ab "RLX_CUDA_GEMV_STREAM=auto"
timeout 90 $R/rlx_quant_bench --only gemv > "$L/quant-gemv.log" 2>&1; echo "quant rc=$?"
(cd bench && timeout 60 python3 quant_torch.py) > "$L/quant-torch.log" 2>&1; echo "quant torch rc=$?"
pack
grep -E "q4_0|q4_k|q5_k|q6_k|q8_0|iq4_xs" "$L/quant-gemv.log" | head -14
grep -E "4096|3072" "$L/quant-torch.log" | head -4
for m in minilm-l6 bert-base; do
  RLX_DISPATCH_REPORT=1 timeout 60 $R/rlx_bert_bench --graphs-only --model $m --shape 256x128 > "$L/$m-256x128-report.log" 2>&1
  echo "$m report rc=$?"
done
pack
