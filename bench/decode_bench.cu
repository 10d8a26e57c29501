// The kernels of one Gemma 3 270M decode layer, alone, at its shapes (bf16
// activations, hidden 640, 4 query heads on 1 kv head of dimension 256, its
// GGUF weight types), each replayed as a chain of dependent launches in one
// CUDA graph captured by the runtime's encoder: programmatic edges on Hopper,
// as `rlx generate` runs a decode step. Per-launch time = replay / launches,
// median of 15 replays (bench/graph_timing.cuh).
//
// The first row is an empty rlx kernel that only waits on the one before it
// (griddepcontrol.wait): the floor a dependent launch costs on this GPU. A
// kernel's "above floor" column is the latency it adds to a decode step.
// Nsight Compute's serialized durations (scripts/gpu_profile.sh decode) count
// neither the launch overlap nor the floor, so they overstate short kernels.
//
// The GEMV rows read a different copy of the weights per launch (256 MB in
// all, beyond the 60 MB L2), as a decode step reads each layer's weights once;
// the other kernels' operands are a few KB and stay in L2, as in decode.
// Prints per-launch µs for: the floor, the post-norm (FusedPostRmsNorm with
// the next pre-norm), rope of Q and K with QK-norm and the K/V cache writes
// (one launch), decode attention over 96, 160 and 1024 cached keys (sliding
// window 512; --keys sets the counts), and the GEMVs of the layer's projections.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/bench_util.h"
#include "bench/graph_timing.cuh"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/kernels/attention.h"
#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

// In rlx::cuda so the encoder makes the edge into it programmatic (encoder.cpp).
namespace rlx::cuda {
namespace {
__global__ void floor_kernel() { dev::pdl_begin(); }
}  // namespace
void launch_floor(cudaStream_t s) {
  floor_kernel<<<1, 32, 0, s>>>();
  RLX_CUDA_CHECK(cudaGetLastError());
}
}  // namespace rlx::cuda

namespace {

using namespace rlx;

constexpr int kChain = 64;                  // launches per graph for the small kernels
constexpr size_t kColdBytes = size_t{256} << 20;
constexpr int64_t kHidden = 640, kHeads = 4, kKvHeads = 1, kHeadDim = 256, kCapacity = 1024;

void* device_bytes(size_t n) {
  void* p = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&p, n));
  return p;
}
void* device_bf16(size_t n, uint64_t seed) {
  void* p = device_bytes(n * 2);
  bench::fill_uniform(p, n, DType::BF16, seed);
  return p;
}
void* device_f32(size_t n, float value) {
  std::vector<float> h(n, value);
  void* p = device_bytes(n * 4);
  RLX_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
  return p;
}
int32_t* device_i32(int32_t value) {
  auto* p = static_cast<int32_t*>(device_bytes(4));
  RLX_CUDA_CHECK(cudaMemcpy(p, &value, 4, cudaMemcpyHostToDevice));
  return p;
}

double floor_us = 0;
void row(const std::string& name, double ms) {
  const double us = ms * 1e3;
  std::printf("%-52s %9.2f %9.2f\n", name.c_str(), us, us - floor_us);
  bench::json_line("decode_kernels", name, us, "us");
}

// Weight copies filling kColdBytes: random bytes, every odd byte's top two
// bits cleared so the f16 scale fields stay finite (the values do not change the timing).
struct ColdWeights {
  uint8_t* base = nullptr;
  size_t pitch = 0;
  int copies = 0;
  ColdWeights(DType t, int64_t n, int64_t k) {
    const size_t bytes = static_cast<size_t>(dtype_bytes(t, n * k));
    pitch = (bytes + 255) / 256 * 256;
    copies = static_cast<int>(std::max<size_t>(kChain, kColdBytes / pitch));
    base = static_cast<uint8_t*>(device_bytes(pitch * copies));
    std::mt19937_64 rng(42);
    std::vector<uint8_t> h(bytes);
    for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<uint8_t>(rng()) & (i % 2 ? 0x3F : 0xFF);
    for (int c = 0; c < copies; ++c) RLX_CUDA_CHECK(cudaMemcpy(base + pitch * c, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  ~ColdWeights() { cudaFree(base); }
  const uint8_t* copy(int i) const { return base + pitch * (i % copies); }
};

}  // namespace

int main(int argc, char** argv) {
  // Cached-key counts of the attention rows (--keys 96,160,1024 by default).
  std::vector<int32_t> key_counts = {96, 160, 1024};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--keys" && i + 1 < argc) {
      key_counts.clear();
      std::stringstream list(argv[++i]);
      for (std::string v; std::getline(list, v, ',');) {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < 1 || n > kCapacity) {
          std::fprintf(stderr, "rlx_decode_bench: --keys wants counts in 1..%d, got '%s'\n", static_cast<int>(kCapacity), v.c_str());
          return 2;
        }
        key_counts.push_back(static_cast<int32_t>(n));
      }
      if (key_counts.empty()) {
        std::fprintf(stderr, "rlx_decode_bench: --keys wants at least one count\n");
        return 2;
      }
      continue;
    }
    std::printf("usage: rlx_decode_bench [--keys N,N,...]\n  Gemma 3 270M decode-layer kernels, one at a time, as chained graph launches.\n"
                "  --keys  cached-key counts of the decode attention rows (default 96,160,1024)\n");
    return arg == "--help" || arg == "-h" ? 0 : 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("decode_bench: no CUDA device; skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cuda::stage_quant_tables();
  const auto chain = [](const std::function<void(cudaStream_t)>& f) {
    return bench::time_per_call_graph(kChain, [&](int, cudaStream_t s) { f(s); });
  };

  std::printf("\n%-52s %9s %9s\n", "Gemma 3 270M decode kernel (bf16, chained in a graph)", "us", "above floor");
  floor_us = chain([](cudaStream_t s) { cuda::launch_floor(s); }) * 1e3;
  row("floor: empty kernel, griddepcontrol.wait only", floor_us * 1e-3);

  // Post-norm: y = x + rmsnorm(a)·w1, h = rmsnorm(y)·w2 over one 640-wide row.
  {
    void *x = device_bf16(kHidden, 1), *a = device_bf16(kHidden, 2), *y = device_bf16(kHidden, 3),
         *h = device_bf16(kHidden, 4);
    void *w1 = device_f32(kHidden, 1.0f), *w2 = device_f32(kHidden, 0.5f);
    row("post-norm + next pre-norm, 1 x 640", chain([&](cudaStream_t s) {
          cuda::launch_post_rms_norm(DType::BF16, DType::F32, x, a, w1, w2, y, h, 1, kHidden, 1e-6f, s);
        }));
    for (void* p : {x, a, y, h, w1, w2}) cudaFree(p);
  }

  // Rope of Q (4 heads) and K (1 head) with QK-norm, K and V into the caches.
  void* k_cache = device_bf16(kCapacity * kKvHeads * kHeadDim, 5);
  void* v_cache = device_bf16(kCapacity * kKvHeads * kHeadDim, 6);
  void* q_rot = device_bf16(kHeads * kHeadDim, 7);
  {
    const int64_t width = (kHeads + 2 * kKvHeads) * kHeadDim;  // the q | k | v projection row
    void* qkv = device_bf16(width, 8);
    void *q_norm = device_f32(kHeadDim, 1.0f), *k_norm = device_f32(kHeadDim, 1.0f);
    int32_t *pos = device_i32(160), *cache_pos = device_i32(160), *err = device_i32(0);
    cuda::RopeQkvWrite w;
    w.dtype = w.cache_dtype = DType::BF16;
    w.q = w.k = w.v = qkv;
    w.q_stride = w.k_stride = w.v_stride = width;
    w.v_offset = (kHeads + kKvHeads) * kHeadDim;
    RopeAttrs ra;
    ra.head_dim = ra.n_rot = static_cast<int>(kHeadDim);
    ra.pairing = RopePairing::NeoX;
    ra.freq_base = 1e6f;
    ra.head_norm = true;
    w.q_attrs = w.k_attrs = ra;
    w.q_attrs.num_heads = static_cast<int>(kHeads);
    w.k_attrs.num_heads = static_cast<int>(kKvHeads);
    w.k_attrs.src_offset = kHeads * kHeadDim;
    w.q_norm = q_norm;
    w.k_norm = k_norm;
    w.positions = pos;
    w.cache_pos = cache_pos;
    w.y = q_rot;
    w.k_cache = k_cache;
    w.v_cache = v_cache;
    w.B = w.L = 1;
    w.capacity = kCapacity;
    w.error_flag = err;
    w.inputs_ready = true;  // as in decode: positions and the cache offset are program inputs
    row("rope q, k (QK-norm) + k, v -> cache", chain([&](cudaStream_t s) { cuda::launch_rope_qkv_write(w, s); }));
    for (void* p : {qkv, q_norm, k_norm, static_cast<void*>(pos), static_cast<void*>(cache_pos), static_cast<void*>(err)})
      cudaFree(p);
  }

  // Decode attention: 1 query, 4 heads on 1 kv head, D = 256, causal, window 512.
  for (int32_t kv : key_counts) {
    cuda::AttentionParams p;
    p.dtype = DType::BF16;
    p.B = 1;
    p.Lq = 1;
    p.Lk = static_cast<int>(kCapacity);
    p.H = static_cast<int>(kHeads);
    p.Hkv = static_cast<int>(kKvHeads);
    p.D = static_cast<int>(kHeadDim);
    p.scale = 1.0f / 16.0f;  // query_pre_attn_scalar 256
    p.causal = true;
    p.window = 512;
    p.set_dense_strides();
    p.q = q_rot;
    p.k = k_cache;
    p.v = v_cache;
    void* out = device_bf16(kHeads * kHeadDim, 9);
    p.out = out;
    int32_t* len = device_i32(kv);
    p.kv_len = len;
    p.kv_len_shared = true;
    // As in decode: kv_len and the cache offset are program inputs, and every
    // cache row but this step's (written by rope) is from earlier steps.
    int32_t* stable = device_i32(kv - 1);
    p.kv_len_ready = true;
    p.kv_stable = stable;
    const size_t counters = cuda::attention_counter_ints(p);
    void* cnt = counters ? device_bytes(counters * 4) : nullptr;
    if (cnt) RLX_CUDA_CHECK(cudaMemset(cnt, 0, counters * 4));
    p.counters = static_cast<int32_t*>(cnt);
    const size_t ws_bytes = cuda::attention_workspace_bytes(p);
    void* ws = ws_bytes ? device_bytes(ws_bytes) : nullptr;
    row(str("decode attention, ", kv, " cached keys (",
                   cuda::attention_path_name(cuda::attention_path(p)), ")"),
        chain([&](cudaStream_t s) { cuda::launch_attention(p, ws, s); }));
    for (void* q : {out, static_cast<void*>(len), static_cast<void*>(stable), cnt, ws}) cudaFree(q);
  }
  cudaFree(k_cache);
  cudaFree(v_cache);
  cudaFree(q_rot);

  // The layer's GEMVs (m = 1, bf16 x and y), cold weights.
  struct Gemv {
    const char* what;
    DType t;
    int64_t n, k;
    bool glu;
  };
  const Gemv gemvs[] = {{"q", DType::Q5_0, 1024, 640, false},
                        {"k", DType::Q5_0, 256, 640, false},
                        {"v", DType::Q8_0, 256, 640, false},
                        {"o", DType::Q4_K, 640, 1024, false},
                        {"gate|up + GeGLU", DType::Q5_0, 4096, 640, true},
                        {"down", DType::Q6_K, 640, 2048, false}};
  void* x = device_bf16(4096, 10);
  void* y = device_bf16(4096, 11);
  const cuda::GluKind geglu = cuda::GluKind::GeGLUTanh;
  for (const Gemv& g : gemvs) {
    ColdWeights w(g.t, g.n, g.k);
    const bool glu = g.glu && cuda::quant_gemv_fuses_glu(g.t, w.copy(0), g.n, g.k);
    const double ms = bench::time_per_call_graph(w.copies, [&](int i, cudaStream_t s) {
      cuda::launch_quant_gemv(g.t, w.copy(i), DType::BF16, x, y, 1, g.n, g.k, s, glu ? &geglu : nullptr);
    });
    row(str("gemv ", g.what, " ", dtype_name(g.t), " ", g.n, "x", g.k, glu ? " (glu fused)" : ""), ms);
  }
  cudaFree(x);
  cudaFree(y);
  return 0;
}
