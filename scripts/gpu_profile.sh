#!/usr/bin/env bash
# Device call: Nsight Compute on the kernels that dominate the end-to-end
# benchmarks (needs a machine where ncu reads counters: Firecracker kinds).
#   scripts/gpu_profile.sh OUTDIR [decode] [bert] [attention] [gemm] [gemmln] [persistent]
# decode:    every kernel of two Gemma decode tokens, durations only (ncu
#            serializes kernels, so these exclude launch gaps: compare their
#            sum with the graph-replayed token time), then the decode
#            attention and GEMV kernels in detail;
# bert:      MiniLM 256x128 attention prefill, GELU and layer norm in detail;
# attention: the D = 32 prefill kernel at MiniLM's shape (rlx_attention_bench,
#            no mask) with its instruction mix and per-source-line counters;
# gemm:      the ping-pong GEMM with GELU-erf at MiniLM's FFN up (rlx_gemm_bench
#            --only sm90), the same sections, to see where its epilogue stalls;
# gemmln:    MiniLM's FFN down (32768 x 384 x 1536, f16) both ways: the fused
#            GEMM + LayerNorm kernel, and cuBLASLt's GEMM then the norm kernel
#            (rlx_gemm_bench --only ln), with memory and warp-state sections;
# persistent: one launch of the persistent decode kernel (RLX_CUDA_PERSISTENT=1,
#            synthetic Gemma), warp states, instruction mix and source counters.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_profile.sh OUTDIR [decode] [bert] [attention] [gemm] [gemmln]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -x "$NCU" ] || { echo "gpu_profile: no ncu"; exit 1; }
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
what=${*:-"decode bert"}
for w in $what; do
  case $w in
    decode)
      GEN="$B/bench/rlx_generate_bench ${RLX_GEMMA_GGUF:-} --device cuda --dtype bf16 --kv-dtype bf16"
      timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 6000 --launch-count 754 \
        $GEN > "$OUT/ncu-decode-durations.csv" 2> "$OUT/ncu-decode.err"
      timeout 200 "$NCU" --clock-control none --kernel-name regex:"attn_decode_kernel|gemv_kernel" --launch-skip 300 \
        --launch-count 6 $SECTIONS $GEN > "$OUT/ncu-decode-kernels.txt" 2>&1
      ;;
    bert)
      timeout 200 "$NCU" --clock-control none --kernel-name regex:"attn_prefill_kernel|unary_kernel|norm" \
        --launch-skip 30 --launch-count 3 $SECTIONS $B/bench/rlx_bert_bench --model minilm-l6 --shape 256x128 --graphs-only \
        > "$OUT/ncu-bert-kernels.txt" 2>&1
      ;;
    attention)
      timeout 200 "$NCU" --clock-control none --kernel-name-base demangled \
        --kernel-name regex:'attn_prefill_kernel<__half, [^,]*32, [^>]*(0|false)>' --launch-skip 5 --launch-count 1 \
        $SECTIONS --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
        --print-details all $B/bench/rlx_attention_bench > "$OUT/ncu-attention-d32.txt" 2>&1
      ;;
    gemm)  # the first GELU-erf ping-pong launch is MiniLM's FFN up (32768 x 1536 x 384, f16)
      timeout 300 "$NCU" --clock-control none --kernel-name-base demangled \
        --kernel-name regex:'gemm_pp_kernel<__half, [^>]*Activation[)]1>' --launch-skip 3 --launch-count 1 \
        $SECTIONS --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
        --print-details all $B/bench/rlx_gemm_bench --only sm90 > "$OUT/ncu-gemm-gelu.txt" 2>&1
      ;;
    gemmln)  # --only ln launches 108 kernels for attention-out (35 + 1 unfused pairs, 35 + 1 fused) before FFN down
      timeout 300 "$NCU" --clock-control none --kernel-name-base demangled --kernel-name regex:gemm_ln_kernel \
        --launch-skip 40 --launch-count 1 $SECTIONS --section ComputeWorkloadAnalysis --print-details all \
        $B/bench/rlx_gemm_bench --only ln > "$OUT/ncu-gemm-ln-ffn2.txt" 2>&1
      timeout 300 "$NCU" --clock-control none --kernel-name-base demangled --launch-skip 116 --launch-count 4 \
        $SECTIONS --section ComputeWorkloadAnalysis $B/bench/rlx_gemm_bench --only ln \
        > "$OUT/ncu-cublaslt-ln-ffn2.txt" 2>&1
      ;;
    persistent)  # the persistent decode kernel (RLX_CUDA_PERSISTENT=1, synthetic Gemma): why its ops take 4-24 us.
      # Warp states answer the instruction-fetch hypothesis (stall "no_instruction" / "branch_resolving"
      # against "long_scoreboard" for memory); source counters say which op's code stalls.
      RLX_CUDA_PERSISTENT=1 timeout 300 "$NCU" --clock-control none --kernel-name regex:persistent_kernel \
        --launch-skip 40 --launch-count 1 $SECTIONS --section InstructionStats --section SourceCounters \
        --print-details all $B/bench/rlx_generate_bench --synthetic --device cuda --dtype bf16 --kv-dtype bf16 \
        > "$OUT/ncu-persistent.txt" 2>&1
      ;;
  esac
done
