// cuDNN graph-path attention beside rlx's own flash attention, on the prefill
// shapes of bench/attention_bench.cu and bench/attention_torch.py (same case
// names, so bench/compare.py joins all three: impl "rlx", "rlx-cudnn", "torch").
//
// f16/bf16 × causal/non-causal × D 64/128 × seq 512/4096, B·L = 16384 tokens,
// H = 16 at D = 128 and 32 at D = 64. FLOPs = 4·B·H·L²·D, halved when causal.
// Each figure: 5 warm-ups, then the median of 30 launches timed one by one
// with CUDA events; random inputs in [-1, 1]. Before timing, the cuDNN output
// is checked against rlx's kernel on the same inputs (max abs difference
// printed; the run fails above 2e-2 for f16 / 6e-2 for bf16), so a fast but
// wrong plan cannot report a figure.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/bench_util.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/cudnn_graph.h"
#include "rlx/backends/cuda/kernels/attention.h"

namespace {

// Max |a − b| over n elements, both of dtype dt (result in *out, device).
template <typename T>
__global__ void max_abs_diff(const T* a, const T* b, size_t n, float* out) {
  float m = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<size_t>(blockDim.x)) {
    const float d = fabsf(static_cast<float>(a[i]) - static_cast<float>(b[i]));
    m = d == d ? fmaxf(m, d) : INFINITY;  // NaN counts as infinitely wrong
  }
  atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(m));  // floats ≥ 0 order like uints
}

void fill(void* p, size_t n, rlx::DType dt, uint64_t seed) { rlx::bench::fill_uniform(p, n, dt, seed); }

float diff(const void* a, const void* b, size_t n, rlx::DType dt) {
  float* d = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&d, sizeof(float)));
  RLX_CUDA_CHECK(cudaMemset(d, 0, sizeof(float)));
  if (dt == rlx::DType::F16)
    max_abs_diff<<<1024, 256>>>(static_cast<const __half*>(a), static_cast<const __half*>(b), n, d);
  else
    max_abs_diff<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), n, d);
  RLX_CUDA_CHECK(cudaGetLastError());
  float h = 0;
  RLX_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(float), cudaMemcpyDeviceToHost));
  RLX_CUDA_CHECK(cudaFree(d));
  return h;
}

double time_ms(const std::function<void()>& launch) { return rlx::bench::median_event_ms(launch); }

void emit(const std::string& c, double v, const char* impl) {
  std::printf("{\"bench\": \"attention\", \"case\": \"%s\", \"value\": %.3f, \"unit\": \"TFLOP/s\", \"impl\": \"%s\"}\n",
              c.c_str(), v, impl);
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = rlx::bench::no_options(argc, argv, "rlx_cudnn_bench",
                                            "cuDNN SDPA (the vendor-graph path) against rlx's attention kernels on the "
                                            "attention benchmark's shapes; torch peer: bench/attention_torch.py.");
      rc >= 0)
    return rc;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("cudnn_bench: no CUDA device; skipped\n");
    return 0;
  }
  std::string why;
  if (!rlx::cuda::cudnn::available(&why)) {
    std::printf("cudnn_bench: cuDNN unavailable (%s); skipped\n", why.c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, cuDNN %s\n", prop.name, rlx::cuda::cudnn::version().c_str());
  const int64_t tokens = 16384;
  int failures = 0, cases = 0, ran = 0;
  std::printf("\n%-44s %9s %9s %9s %9s %9s\n", "prefill", "rlx ms", "cudnn ms", "rlx TF/s", "cudnn TF/s", "max|diff|");
  for (rlx::DType dt : {rlx::DType::F16, rlx::DType::BF16}) {
    for (bool causal : {false, true}) {
      for (int D : {64, 128}) {
        for (int L : {512, 4096}) {
          const int B = static_cast<int>(tokens / L), H = D == 128 ? 16 : 32;
          const size_t n = static_cast<size_t>(B) * L * H * D, bytes = n * 2;
          void *q, *k, *v, *o_rlx, *o_dnn;
          for (void** p : {&q, &k, &v, &o_rlx, &o_dnn}) RLX_CUDA_CHECK(cudaMalloc(p, bytes));
          fill(q, n, dt, 1);
          fill(k, n, dt, 2);
          fill(v, n, dt, 3);

          rlx::cuda::AttentionParams p;
          p.dtype = dt;
          p.B = B;
          p.Lq = p.Lk = L;
          p.H = p.Hkv = H;
          p.D = D;
          p.scale = 1.0f / std::sqrt(static_cast<float>(D));
          p.causal = causal;
          p.set_dense_strides();
          p.q = q;
          p.k = k;
          p.v = v;
          p.out = o_rlx;
          void* ws = nullptr;
          if (size_t w = rlx::cuda::attention_workspace_bytes(p)) RLX_CUDA_CHECK(cudaMalloc(&ws, w));

          rlx::cuda::cudnn::AttentionSpec s;
          s.dtype = dt;
          s.B = B;
          s.Lq = s.Lk = L;
          s.H = s.Hkv = H;
          s.D = D;
          s.scale = p.scale;
          s.causal = causal;
          s.set_dense_strides();
          const std::string name = std::string("prefill ") + (dt == rlx::DType::F16 ? "f16" : "bf16") +
                                   (causal ? " causal" : " full") + " D" + std::to_string(D) + " B" +
                                   std::to_string(B) + " H" + std::to_string(H) + " L" + std::to_string(L);
          const double flops = 4.0 * B * H * double(L) * L * D * (causal ? 0.5 : 1.0);
          const double ms_rlx = time_ms([&] { rlx::cuda::launch_attention(p, ws, nullptr); });
          std::string refused;
          auto plan = rlx::cuda::cudnn::attention_plan(0, s, &refused);
          double ms_dnn = 0;
          float err = 0;
          if (plan) {
            void* dws = nullptr;
            if (size_t w = rlx::cuda::cudnn::plan_workspace_bytes(*plan)) RLX_CUDA_CHECK(cudaMalloc(&dws, w));
            rlx::cuda::cudnn::Execution exec(plan, {q, k, v, o_dnn});
            ms_dnn = time_ms([&] { exec.run(dws, nullptr); });
            err = diff(o_rlx, o_dnn, n, dt);
            if (!(err <= (dt == rlx::DType::F16 ? 2e-2f : 6e-2f))) {
              std::printf("FAIL %s: cuDNN output differs from rlx's kernel by %g\n", name.c_str(), err);
              ++failures;
            }
            if (dws) RLX_CUDA_CHECK(cudaFree(dws));
          }
          const double tf_rlx = flops / (ms_rlx * 1e-3) / 1e12;
          const double tf_dnn = plan ? flops / (ms_dnn * 1e-3) / 1e12 : 0.0;
          if (plan) {
            std::printf("%-44s %9.3f %9.3f %9.1f %9.1f %9.2g  %s\n", name.c_str(), ms_rlx, ms_dnn, tf_rlx, tf_dnn, err,
                        rlx::cuda::cudnn::plan_engine(*plan).c_str());
          } else {
            std::printf("%-44s %9.3f %9s %9.1f %9s  cuDNN refused: %s\n", name.c_str(), ms_rlx, "-", tf_rlx, "-",
                        refused.c_str());
          }
          ++cases;
          ran += plan ? 1 : 0;
          emit(name, tf_rlx, "rlx");
          if (plan) emit(name, tf_dnn, "rlx-cudnn");
          for (void* ptr : {q, k, v, o_rlx, o_dnn}) RLX_CUDA_CHECK(cudaFree(ptr));
          if (ws) RLX_CUDA_CHECK(cudaFree(ws));
        }
      }
    }
  }
  std::printf("cudnn_bench: cuDNN ran %d of %d cases (the others print cuDNN's refusal reason)\n", ran, cases);
  if (failures) std::printf("cudnn_bench: %d case(s) FAILED the output check\n", failures);
  return failures ? 1 : 0;
}
