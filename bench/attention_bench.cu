// Attention throughput: rlx::cuda::launch_attention on the shapes of
// bench/attention_torch.py (its PyTorch SDPA peer); bench/compare.py joins
// the two JSON-line outputs.
//
// Prefill: f16/bf16 × causal/non-causal × D 64/128 × seq 512/4096, batch so
// that B·L = 16384 tokens, H = 16 at D = 128 and 32 at D = 64 (each of Q, K,
// V, O is 64 MiB, larger than L2). FLOPs = 4·B·H·L²·D, halved when causal.
// Decode: Lq = 1 over a KV cache (H = 32, Hkv = 8, D = 128), reported as
// bytes of K/V (+ q, out) read per second against the measured copy rate.
// Each figure: 5 warm-up launches, then the median of 30 launches timed one
// by one with CUDA events; random inputs in [-1, 1].
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/bench_util.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/kernels/attention.h"

namespace {

void fill(void* p, size_t n, rlx::DType dt, uint64_t seed) { rlx::bench::fill_uniform(p, n, dt, seed); }

// Median ms of individually timed launches (bench_cuda.cuh).
double time_attention(const rlx::cuda::AttentionParams& p, void* ws) {
  return rlx::bench::median_event_ms([&] { rlx::cuda::launch_attention(p, ws, nullptr); });
}

const char* dname(rlx::DType dt) { return dt == rlx::DType::F16 ? "f16" : "bf16"; }

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = rlx::bench::no_options(argc, argv, "rlx_attention_bench",
                                            "Attention fp16/bf16 (causal and not, head dims 64 and 128, seq 512 and 4096) "
                                            "and decode, in TFLOP/s beside the bf16 GEMM limit; torch peer: bench/attention_torch.py.");
      rc >= 0)
    return rc;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("attention_bench: no CUDA device; skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("hardware limit: bf16 GEMM %.0f TFLOP/s, copy %.2f TB/s (measured, bench_util.h)\n",
              rlx::bench::kGemmBf16Tflops, rlx::bench::kCopyTBps);

  const size_t tokens = 16384;
  const size_t max_elems = tokens * 2048;  // H·D = 2048 in every prefill config
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&q, max_elems * 2));
  RLX_CUDA_CHECK(cudaMalloc(&k, max_elems * 2));
  RLX_CUDA_CHECK(cudaMalloc(&v, max_elems * 2));
  RLX_CUDA_CHECK(cudaMalloc(&o, max_elems * 2));

  std::printf("\n%-44s %4s %4s %9s %9s  %s\n", "prefill", "B", "H", "ms", "TFLOP/s", "path");
  for (rlx::DType dt : {rlx::DType::F16, rlx::DType::BF16}) {
    fill(q, max_elems, dt, 1);
    fill(k, max_elems, dt, 2);
    fill(v, max_elems, dt, 3);
    for (int causal : {0, 1})
      for (int D : {64, 128})
        for (int L : {512, 4096}) {
          rlx::cuda::AttentionParams p;
          p.dtype = dt;
          p.B = static_cast<int>(tokens / L);
          p.H = p.Hkv = D == 128 ? 16 : 32;
          p.D = D;
          p.Lq = p.Lk = L;
          p.scale = 1.0f / std::sqrt(static_cast<float>(D));
          p.causal = causal != 0;
          p.q = q;
          p.k = k;
          p.v = v;
          p.out = o;
          p.set_dense_strides();
          const double ms = time_attention(p, nullptr);
          double flops = 4.0 * p.B * p.H * static_cast<double>(L) * L * D;
          if (causal) flops *= 0.5;
          const double tf = flops / (ms * 1e-3) / 1e12;
          char key[128];
          std::snprintf(key, sizeof key, "prefill %s %s D%d B%d H%d L%d", dname(dt), causal ? "causal" : "full", D,
                        p.B, p.H, L);
          std::printf("%-44s %4d %4d %9.3f %9.1f  %s (%.0f%% of GEMM peak)\n", key, p.B, p.H, ms, tf,
                      rlx::cuda::attention_path_name(rlx::cuda::attention_path(p)),
                      100.0 * tf / rlx::bench::kGemmBf16Tflops);
          rlx::bench::json_line("attention", key, tf, "TFLOP/s");
        }
  }

  // Sentence-embedding shapes (MiniLM: 12 heads × D 32; BERT-base: 12 × 64)
  // read straight out of a fused QKV buffer, without a mask, with a padding
  // key mask (all keys kept, so the work is equal) and with per-sequence
  // lengths (kv_len, realistic lengths: tiles past each length are skipped);
  // the padding mask as an encoder's later layers run it (key_mask_scratch
  // with the lengths ready: the mask-free kernel, rows as lengths);
  // then the same bytes head-major (Q, K, V each [B·H, L, D], contiguous per
  // head: the layout a QKV projection could write), to show what the fused
  // layout's 2·D-byte pieces of every row cost. % of copy: Q, K, V read and
  // O written once (every key; the kv_len rows read fewer).
  std::printf("\n%-44s %4s %4s %9s %9s  %s\n", "embedding shapes (fused QKV)", "B", "H", "ms", "TFLOP/s", "path");
  for (int D : {32, 64}) {
    const int B = 256, H = 12, L = 128;
    const size_t n = static_cast<size_t>(B) * L * 3 * H * D;
    void* qkv = nullptr;
    uint8_t* mask = nullptr;
    int32_t* lens = nullptr;
    int32_t* scratch = nullptr;
    RLX_CUDA_CHECK(cudaMalloc(&qkv, n * 2));
    RLX_CUDA_CHECK(cudaMalloc(&scratch, rlx::cuda::key_mask_scratch_ints(B) * sizeof(int32_t)));
    RLX_CUDA_CHECK(cudaMalloc(&mask, static_cast<size_t>(B) * L));
    RLX_CUDA_CHECK(cudaMalloc(&lens, B * sizeof(int32_t)));
    fill(qkv, n, rlx::DType::F16, 7);
    RLX_CUDA_CHECK(cudaMemset(mask, 1, static_cast<size_t>(B) * L));
    std::vector<int32_t> h_lens(B);
    for (int b = 0; b < B; ++b) h_lens[b] = 8 + (b * 37) % 121;  // 8..128, mean ≈ 68
    RLX_CUDA_CHECK(cudaMemcpy(lens, h_lens.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int variant = 0; variant < 5; ++variant) {
      rlx::cuda::AttentionParams p;
      p.dtype = rlx::DType::F16;
      p.B = B;
      p.H = p.Hkv = H;
      p.D = D;
      p.Lq = p.Lk = L;
      p.scale = 1.0f / std::sqrt(static_cast<float>(D));
      p.set_dense_strides();
      p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * H * D;
      p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = int64_t{L} * 3 * H * D;
      p.q = qkv;
      p.k = static_cast<__half*>(qkv) + H * D;
      p.v = static_cast<__half*>(qkv) + 2 * H * D;
      p.out = o;
      if (variant == 1) p.key_mask = mask;
      if (variant == 2) p.kv_len = lens;
      if (variant == 4) {
        p.key_mask = mask;
        p.key_mask_scratch = scratch;
        rlx::cuda::launch_attention(p, nullptr, nullptr);  // the first layer: lengths and flags
        p.key_mask_lengths_ready = true;
      }
      if (variant == 3) {  // head-major: B·H sequences of one head each, same bytes
        p.B = B * H;
        p.H = p.Hkv = 1;
        p.set_dense_strides();
        const size_t block = static_cast<size_t>(B) * H * L * D;
        p.k = static_cast<__half*>(qkv) + block;
        p.v = static_cast<__half*>(qkv) + 2 * block;
      }
      const double ms = time_attention(p, nullptr);
      double flops = 4.0 * B * H * static_cast<double>(L) * L * D;
      if (variant == 2) {
        flops = 0;
        for (int b = 0; b < B; ++b) flops += 4.0 * H * static_cast<double>(L) * h_lens[b] * D;
      }
      const double tf = flops / (ms * 1e-3) / 1e12;
      const char* vname[] = {"no mask", "key mask", "kv_len", "head-major", "key mask, lengths"};
      const double copy_pct = 100.0 * 8.0 * B * H * L * D / (ms * 1e-3) / (rlx::bench::kCopyTBps * 1e12);
      char key[128];
      std::snprintf(key, sizeof key, "embed f16 D%d B%d H%d L%d %s", D, B, H, L, vname[variant]);
      std::printf("%-44s %4d %4d %9.4f %9.1f  %s, %.0f%% of copy\n", key, B, H, ms, tf,
                  rlx::cuda::attention_path_name(rlx::cuda::attention_path(p)), copy_pct);
      rlx::bench::json_line("attention", key, ms, "ms");
    }
    RLX_CUDA_CHECK(cudaFree(qkv));
    RLX_CUDA_CHECK(cudaFree(mask));
    RLX_CUDA_CHECK(cudaFree(lens));
    RLX_CUDA_CHECK(cudaFree(scratch));
  }

  // Decode: one query per sequence over a KV cache of Lk tokens.
  std::printf("\n%-44s %4s %4s %9s %9s  %s\n", "decode", "B", "H", "ms", "GB/s", "path");
  for (rlx::DType dt : {rlx::DType::F16, rlx::DType::BF16})
    for (auto [B, Lk] : {std::pair{1, 4096}, std::pair{1, 32768}, std::pair{16, 4096}, std::pair{16, 16384},
                         std::pair{64, 4096}}) {
      rlx::cuda::AttentionParams p;
      p.dtype = dt;
      p.B = B;
      p.H = 32;
      p.Hkv = 8;
      p.D = 128;
      p.Lq = 1;
      p.Lk = Lk;
      p.scale = 1.0f / std::sqrt(128.0f);
      p.set_dense_strides();
      const size_t kv_elems = static_cast<size_t>(B) * Lk * p.Hkv * p.D;
      void *kc = nullptr, *vc = nullptr;
      RLX_CUDA_CHECK(cudaMalloc(&kc, kv_elems * 2));
      RLX_CUDA_CHECK(cudaMalloc(&vc, kv_elems * 2));
      fill(kc, kv_elems, dt, 4);
      fill(vc, kv_elems, dt, 5);
      fill(q, static_cast<size_t>(B) * p.H * p.D, dt, 6);
      p.q = q;
      p.k = kc;
      p.v = vc;
      p.out = o;
      const size_t ws_bytes = rlx::cuda::attention_workspace_bytes(p);
      void* ws = nullptr;
      if (ws_bytes) RLX_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
      const double ms = time_attention(p, ws);
      const double bytes = 2.0 * kv_elems * 2 + 2.0 * B * p.H * p.D * 2;
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      char key[128];
      std::snprintf(key, sizeof key, "decode %s D128 B%d H32/8 Lk%d", dname(dt), B, Lk);
      std::printf("%-44s %4d %4d %9.4f %9.0f  %s (%.0f%% of copy rate)\n", key, B, p.H, ms, gbps,
                  rlx::cuda::attention_path_name(rlx::cuda::attention_path(p)),
                  100.0 * gbps / (rlx::bench::kCopyTBps * 1e3));
      rlx::bench::json_line("attention", key, gbps, "GB/s");
      if (ws) RLX_CUDA_CHECK(cudaFree(ws));
      RLX_CUDA_CHECK(cudaFree(kc));
      RLX_CUDA_CHECK(cudaFree(vc));
    }

  RLX_CUDA_CHECK(cudaFree(q));
  RLX_CUDA_CHECK(cudaFree(k));
  RLX_CUDA_CHECK(cudaFree(v));
  RLX_CUDA_CHECK(cudaFree(o));
  return 0;
}
