#!/usr/bin/env bash
# Device call: compute-sanitizer on a reduced GPU suite (issue 3's acceptance:
# memcheck and racecheck clean). Covers the kernel families with shared
# memory, irregular indexing or cross-CTA merges:
#   memcheck  the f16 CUDA conformance cases of attention (prefill and split-KV
#             decode), rope, norms, softmax, argmax/top-k/sampling, gather and
#             cache writes; a tiny Gemma's prefill + decode on CUDA (quantized
#             GEMV with fused GLU, rope + KV-cache writes, decode attention,
#             post-norms, device sampling); the quantized GEMV tests; the sm90
#             GEMM (TMA + wgmma); the quantized sm90 GEMM (TMA, cp.async,
#             split-K through distributed shared memory); whole programs with
#             and without graphs (their copies in and out, pooled output blocks);
#             the Fourier transforms (cuFFT plans, the norm scale, complex
#             views) and the splat rasterizer (tile binning, sorted ranges);
#   racecheck the tiny Gemma, the f16 attention, norm and softmax cases, and
#             the splat rasterizer (per-tile shared-memory batches).
# Needs a GPU build in $B (scripts/gpu_run.sh builds it). Each run has its own
# time limit (RLX_SANITIZE_LIMIT seconds, default 150); RLX_SANITIZE_ONLY (a
# bash regex) keeps the runs whose names match it; logs go to OUTDIR.
#   scripts/gpu_sanitize.sh OUTDIR [memcheck] [racecheck]
set -uo pipefail
OUT=${1:?usage: scripts/gpu_sanitize.sh OUTDIR [memcheck] [racecheck]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
[ -x "$CS" ] || { echo "gpu_sanitize: no compute-sanitizer"; exit 1; }
LIMIT=${RLX_SANITIZE_LIMIT:-150}
status=0
run() {
  local name=$1 tool=$2
  shift 2
  [[ -n "${RLX_SANITIZE_ONLY:-}" && ! $name =~ $RLX_SANITIZE_ONLY ]] && return
  timeout "$LIMIT" "$CS" --tool "$tool" --error-exitcode 3 "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)  \]' "$OUT/$name.log" | tr '\n' ' ')"
}
F16_CASES='*cuda_attention*_f16:*cuda_rope*_f16:*cuda_post*_f16:*cuda_softmax*_f16:*cuda_layernorm*_f16'
F16_CASES+=':*cuda_rmsnorm*_f16:*cuda_residual*_f16:*cuda_argmax*_f16:*cuda_topk*_f16:*cuda_sample*_f16'
F16_CASES+=':*cuda_gather*_f16:*cuda_write*_f16'
for tool in ${*:-memcheck racecheck}; do
  case $tool in
    memcheck)
      run memcheck-conformance memcheck "$B/tests/rlx_op_tests" --gtest_filter="$F16_CASES"
      run memcheck-decode memcheck "$B/tests/rlx_gpu_tests" \
        --gtest_filter='Archs/TinyLlmGpu.CudaLogitsMatchCpu/gemma3:CudaQuantGemv.*:GemmSm90.LongK:AttentionGpu.DecodeStableRowsReadEarly'
      run memcheck-qgemm memcheck "$B/tests/rlx_gpu_tests" --gtest_filter='CudaQuantGemm.*'
      run memcheck-programs memcheck "$B/tests/rlx_gpu_tests" \
        --gtest_filter='CudaGraphs.*:Cudnn.AttentionMatchesCpuAndThunkPath'
      run memcheck-fft-splat memcheck "$B/tests/rlx_op_tests" \
        --gtest_filter='*cuda_*fft*:*cuda_bitcast*:*cuda_gaussian_splat*'
      run memcheck-fft-splat-gpu memcheck "$B/tests/rlx_gpu_tests" --gtest_filter='FftGpu.*:SplatGpu.*'
      ;;
    racecheck)
      run racecheck-decode racecheck "$B/tests/rlx_gpu_tests" \
        --gtest_filter='Archs/TinyLlmGpu.CudaLogitsMatchCpu/gemma3:AttentionGpu.DecodeStableRowsReadEarly'
      run racecheck-conformance racecheck "$B/tests/rlx_op_tests" \
        --gtest_filter='*cuda_attention_causal*_f16:*cuda_rmsnorm*_f16:*cuda_softmax*_f16:*cuda_post*_f16'
      run racecheck-splat racecheck "$B/tests/rlx_op_tests" --gtest_filter='*cuda_gaussian_splat*'
      ;;
    *) echo "gpu_sanitize: unknown tool '$tool' (memcheck, racecheck)"; exit 2 ;;
  esac
done
exit $status
