#!/usr/bin/env bash
# Session 48 call 2: the final tree (1d18b3c: the fused FFN off by default; the GEMM + LayerNorm
# epilogue moved into device/residual_ln.cuh): the full GPU suite and the CUDA op conformance; then
# Nsight Compute on one fused FFN launch and on the two kernels it replaces (MiniLM 256 x 128), to see
# why it is not faster.
cd "$(dirname "$0")/../../../.."
source scripts/carried_call.sh build/carry-s48a/s48a.tar.xz "${1:?OUT}"
suites
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
B="$R/rlx_bert_bench --graphs-only --model minilm-l6 --shape 256x128"
RLX_CUDA_FUSE_FFN_LN=1 timeout 90 $NCU -k regex:ffn_ln_kernel --launch-skip 6 --launch-count 1 $S $B \
  > "$L/ncu-ffn.txt" 2>&1
echo "ncu ffn rc=$? $(grep -E 'Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)' \
  "$L/ncu-ffn.txt" | sed 's/  */ /g' | tr '\n' '|')"
pack
RLX_CUDA_FUSE_FFN_LN=0 timeout 90 $NCU -k regex:'gemm_pp_kernel|gemm_ln_kernel' --launch-skip 12 --launch-count 2 \
  $S $B > "$L/ncu-separate.txt" 2>&1
echo "ncu separate rc=$? $(grep -E 'gemm_pp_kernel|gemm_ln_kernel|Duration|L2 Cache Throughput|Compute \(SM\)' \
  "$L/ncu-separate.txt" | sed 's/  */ /g' | cut -c1-120 | tr '\n' '|')"
pack
