// The feed-forward block in one kernel (ffn_ln_sm90.h).
//
// A CTA of two warpgroups owns 128 rows, 64 each. Thread 0 loads X's 128
// rows once (2·NB slabs of 64 columns, 128-byte swizzle) and starts the
// weights streaming through a ring of six 16 KB slots, in the order the
// warpgroups read them: for each 64-row chunk of F, NB items of W1 (the
// chunk's rows, 128 columns each) and NB items of W2 (128 rows, the chunk's
// 64 columns). Per chunk each warpgroup
//   - computes its 64 × 64 block of X·W1ᵀ (wgmma m64n64k16, A and B from
//     shared memory), adds b1, rounds to T, applies GELU-erf (f16: in f16x2
//     arithmetic unless RLX_CUDA_GELU_F16X2=0) and rounds again (what the up
//     projection's epilogue stores), and keeps the result in
//     registers, already laid out as a wgmma A operand;
//   - multiplies it into its 64 × N accumulators (wgmma m64n128k16 with A
//     from registers, one per 128 columns of W2 and k16 step).
// Each warp counts itself done with a slot once its MMAs have read it; the
// last of the eight refills the slot (there is no producer warpgroup: one
// would cap the consumers at 240 registers, where ptxas spills at N = 384).
// With `ordered` (FfnLnArgs) the warpgroups take turns issuing their MMAs
// (named barriers), so the tensor cores run one's MMAs while the other
// applies its GELU. The CTAs start at different chunks of F (CTA b at chunk
// b mod chunks), so the CTAs running at once do not all ask L2 for the same
// lines. The weights are requested before the programmatic wait.
//
// Registers: 64·NB accumulators (192 at N = 384), 32 for the chunk's X·W1ᵀ
// block and 16 for its A operand: 255 at N = 384, no spills. Epilogue: the
// GEMM + LayerNorm kernel's (device/residual_ln.cuh) over the freed X tile
// and ring. Measured at parity with the two kernels it replaces (H100,
// session 48: latency-bound, L2 32% and SM 42% busy), so the lowering leaves
// it off by default.
#include "rlx/backends/cuda/kernels/ffn_ln_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/atomic>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/activation.cuh"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/residual_ln.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kBM = 128, kFC = 64, kThreads = 256, kSlots = 6, kMaxF = 4096;
constexpr int kItemBytes = 16384;  // a ring slot: one W1 or W2 item
constexpr int kTurnBar = 1, kEpilogueBar = 3;           // named barriers 1-2: turns; 3: the epilogue's

template <int NB>
struct FfnShape {
  static constexpr int N = 128 * NB;
  static constexpr int kXBytes = kBM * N * 2;
  static constexpr int kRingBytes = kSlots * kItemBytes;
  // X, the ring, kSlots + 1 mbarriers, b1, b2, gamma, beta as f32, kSlots counts, slack to align to 1024 bytes.
  static constexpr int kSmemBytes = kXBytes + kRingBytes + (kSlots + 1) * 8 + (kSlots + kMaxF + 3 * N) * 4 + 1024;
  static_assert(residual_ln_stage_bytes<NB>() <= kXBytes + kRingBytes, "the staged Y tile reuses X and the ring");
};

struct FfnKernelArgs {
  const void* b1;
  const void* b2;
  const void* R;
  const void* gamma;
  const void* beta;
  void* Y;
  int M, F;
  float eps;
  int params_f32;
  int ordered;
};

template <typename T>
__device__ __forceinline__ float param_at(const void* p, int c, int is_f32) {
  return is_f32 ? static_cast<const float*>(p)[c] : to_f32(static_cast<const T*>(p)[c]);
}

// round(GELU(round(a + b))) as T pairs: the up projection's stored values
// (kF16x2: f16 in f16x2 arithmetic, dev::gelu_erf_f16x2, as the ping-pong GEMM).
template <typename T, bool kF16x2>
__device__ __forceinline__ uint32_t gelu_pair(float a0, float a1, float2 b) {
  if constexpr (kF16x2) {
    return gelu_erf_f16x2(pack2<T>(a0 + b.x, a1 + b.y));
  } else {
    const float2 x = unpack2<T>(pack2<T>(a0 + b.x, a1 + b.y));
    return pack2<T>(gelu_erf_16bit<T>(x.x), gelu_erf_16bit<T>(x.y));
  }
}

template <typename T, int NB, bool kF16x2 = false>
__global__ void __launch_bounds__(kThreads, 1)
    ffn_ln_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w1,
                  const __grid_constant__ CUtensorMap map_w2, const FfnKernelArgs p) {
  using S = FfnShape<NB>;
  constexpr int N = S::N, kItemsPerChunk = 2 * NB;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  unsigned char* sX = smem;
  unsigned char* ring = smem + S::kXBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + S::kRingBytes);
  uint64_t* xfull = full + kSlots;
  float* s_b1 = reinterpret_cast<float*>(xfull + 1);  // 8-byte aligned: read as float2
  float* s_b2 = s_b1 + kMaxF;
  float* s_gamma = s_b2 + N;
  float* s_beta = s_gamma + N;
  unsigned* released = reinterpret_cast<unsigned*>(s_beta + N);  // per slot: warps done with its item

  const int tid = static_cast<int>(threadIdx.x), w = tid >> 7, lane = tid & 31, t4 = lane & 3;
  const int m0 = static_cast<int>(blockIdx.x) * kBM;
  const int chunks = p.F / kFC, items = chunks * kItemsPerChunk;
  const int rot = static_cast<int>(blockIdx.x) % chunks;
  auto chunk_of = [&](int c) { return c + rot < chunks ? c + rot : c + rot - chunks; };

  // Item `it` into its slot, which no MMA reads any more.
  auto issue = [&](int it) {
    const int s = it % kSlots, c = chunk_of(it / kItemsPerChunk), j = it % kItemsPerChunk;
    unsigned char* slot = ring + s * kItemBytes;
    mbar_arrive_expect_tx(&full[s], kItemBytes);
    if (j < NB) {
      tma_load_2d(slot, &map_w1, 128 * j, kFC * c, &full[s]);
      tma_load_2d(slot + kItemBytes / 2, &map_w1, 128 * j + 64, kFC * c, &full[s]);
    } else {
      tma_load_2d(slot, &map_w2, kFC * c, 128 * (j - NB), &full[s]);
    }
  };
  if (tid == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(&full[s], 1);
      released[s] = 0;
    }
    mbar_init(xfull, 1);
    mbar_fence_init();
    for (int it = 0; it < kSlots && it < items; ++it) issue(it);  // weights: before the programmatic wait
  }
  for (int c = tid; c < p.F; c += kThreads) s_b1[c] = p.b1 != nullptr ? to_f32(static_cast<const T*>(p.b1)[c]) : 0.0f;
  for (int c = tid; c < N; c += kThreads) {
    s_b2[c] = p.b2 != nullptr ? to_f32(static_cast<const T*>(p.b2)[c]) : 0.0f;
    s_gamma[c] = param_at<T>(p.gamma, c, p.params_f32);
    s_beta[c] = param_at<T>(p.beta, c, p.params_f32);
  }
  pdl_begin();  // X and R may be earlier kernels' outputs
  if (tid == 0) {
    mbar_arrive_expect_tx(xfull, S::kXBytes);
    for (int s = 0; s < 2 * NB; ++s) tma_load_2d(sX + s * (kBM * 128), &map_x, 64 * s, m0, xfull);
  }
  __syncthreads();  // the barriers are initialized and the parameters staged

  // After this warp's MMAs are done with the NB items before `it`: the last
  // of the eight warps to release a slot refills it with the item kSlots on
  // (acquire-release on the count: every warp's reads come before the copy).
  auto release = [&](int it) {
    if (lane == 0)
#pragma unroll
      for (int q = NB; q >= 1; --q) {
        const int s = (it - q) % kSlots;
        ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_block> count(released[s]);
        if (count.fetch_add(1, ::cuda::memory_order_acq_rel) == 7) {
          count.store(0, ::cuda::memory_order_relaxed);
          if (it - q + kSlots < items) issue(it - q + kSlots);
        }
      }
  };
  const bool ordered = p.ordered != 0;
  float acc[NB][64];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[nb][i] = 0.0f;

  mbar_wait(xfull, 0);
  if (ordered && w == 1) named_barrier_arrive(kTurnBar, 256);  // consumer 0 goes first
  int it = 0;
  for (int cc = 0; cc < chunks; ++cc) {
    const int f0 = kFC * chunk_of(cc);
    // This warpgroup's 64 rows of the chunk's X·W1ᵀ.
    float h[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) h[i] = 0.0f;
    for (int j = 0; j < NB; ++j) mbar_wait(&full[(it + j) % kSlots], static_cast<uint32_t>((it + j) / kSlots) & 1);
    if (ordered) named_barrier_sync(kTurnBar + w, 256);
    wgmma_fence();
    pin(h);
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const uint32_t slot = smem_u32(ring + (it + j) % kSlots * kItemBytes);
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const uint64_t da = wgmma_desc(smem_u32(sX + (2 * j + kk) * (kBM * 128) + w * (64 * 128)));
        const uint64_t db = wgmma_desc(slot + kk * (kItemBytes / 2));
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma_m64n64k16<T>(h, da + 2 * k, db + 2 * k, 1);
      }
    }
    wgmma_commit();
    if (ordered) named_barrier_arrive(kTurnBar + (w ^ 1), 256);
    wgmma_wait<0>();
    pin(h);
    it += NB;
    release(it);

    // GELU into the A operand of the k16 steps: fragment i of h is at row
    // g (+8 for i % 4 >= 2), column 8·(i / 4) + 2·t4 + i % 2, so step k's
    // registers are h[8k .. 8k + 7] in pairs.
    uint32_t a[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int col = f0 + 16 * k + 8 * (r >> 1) + 2 * t4;
        a[k][r] = gelu_pair<T, kF16x2>(h[8 * k + 2 * r], h[8 * k + 2 * r + 1],
                                       *reinterpret_cast<const float2*>(s_b1 + col));
      }

    for (int j = 0; j < NB; ++j) mbar_wait(&full[(it + j) % kSlots], static_cast<uint32_t>((it + j) / kSlots) & 1);
    if (ordered) named_barrier_sync(kTurnBar + w, 256);
    wgmma_fence();
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) pin(acc[nb]);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const uint64_t db = wgmma_desc(smem_u32(ring + (it + nb) % kSlots * kItemBytes));
#pragma unroll
      for (int k = 0; k < 4; ++k) wgmma_rs_m64n128k16<T>(acc[nb], a[k], db + 2 * k, 1);
    }
    wgmma_commit();
    if (ordered && !(w == 1 && cc == chunks - 1)) named_barrier_arrive(kTurnBar + (w ^ 1), 256);
    wgmma_wait<0>();
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) pin(acc[nb]);
    it += NB;
    release(it);
  }
  named_barrier_sync(kEpilogueBar, 256);  // both warpgroups' MMAs are done with X and the ring
  const int rows = min(kBM, p.M - m0);
  residual_ln_store<T, NB>(acc, smem, static_cast<const T*>(p.R), static_cast<T*>(p.Y), m0, rows, s_b2, s_gamma,
                           s_beta, p.eps, tid, kEpilogueBar);
}

// f16x2: f16's GELU-erf in f16x2 arithmetic (RLX_CUDA_GELU_F16X2).
const void* kernel_for(DType t, int nb, bool f16x2) {
  return by_column_blocks(nb, [t, f16x2](auto c) {
    if (t != DType::F16) return reinterpret_cast<const void*>(ffn_ln_kernel<__nv_bfloat16, c.value>);
    return f16x2 ? reinterpret_cast<const void*>(ffn_ln_kernel<__half, c.value, true>)
                 : reinterpret_cast<const void*>(ffn_ln_kernel<__half, c.value>);
  });
}
int smem_bytes_of(int nb) {
  return by_column_blocks(nb, [](auto c) { return FfnShape<c.value>::kSmemBytes; });
}

}  // namespace

const char* sm90_ffn_ln_unsupported(const FfnLnArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.param_dtype != a.dtype && a.param_dtype != DType::F32) return "gamma/beta are neither the dtype nor f32";
  if (a.N != 128 && a.N != 256 && a.N != 384) return "N is not 128, 256 or 384";
  if (a.F < kFC || a.F > kMaxF || a.F % kFC != 0) return "F is not a multiple of 64 in [64, 4096]";
  if (a.M <= 0) return "empty";
  if (a.M > (int64_t{1} << 31) - kBM) return "too many rows";
  if (a.X == nullptr || a.W1 == nullptr || a.W2 == nullptr || a.R == nullptr || a.gamma == nullptr ||
      a.beta == nullptr || a.Y == nullptr)
    return "a required operand is null";
  if (!sm90_aligned(a.X, 16) || !sm90_aligned(a.W1, 16) || !sm90_aligned(a.W2, 16) || !sm90_aligned(a.R, 16) ||
      !sm90_aligned(a.Y, 16))
    return "X, W1, W2, R or Y is not 16-byte aligned";
  const uintptr_t pe = a.param_dtype == DType::F32 ? 4 : 2;
  if (!sm90_aligned(a.gamma, pe) || !sm90_aligned(a.beta, pe) || (a.b1 != nullptr && !sm90_aligned(a.b1, 2)) ||
      (a.b2 != nullptr && !sm90_aligned(a.b2, 2)))
    return "b1, b2, gamma or beta is misaligned";
  return nullptr;
}

bool sm90_ffn_ln_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (int nb = 1; nb <= 3; ++nb)
      for (DType t : {DType::F16, DType::BF16})
        for (bool f16x2 : {false, true})
          ok = ok && sm90_kernel_loads(kernel_for(t, nb, f16x2), smem_bytes_of(nb), kThreads);
    return ok;
  });
}

void launch_sm90_ffn_ln(const FfnLnArgs& a, cudaStream_t stream) {
  const std::string what =
      str("sm90 ffn + layer_norm ", dtype_name(a.dtype), " M=", a.M, " N=", a.N, " F=", a.F);
  if (const char* why = sm90_ffn_ln_unsupported(a)) throw Unsupported(str(what, ": ", why));
  const int nb = static_cast<int>(a.N / 128);
  CUtensorMap map_x = sm90_slab_map(a.dtype, a.X, a.M, a.N, a.N, kBM, what);
  CUtensorMap map_w1 = sm90_slab_map(a.dtype, a.W1, a.F, a.N, a.N, kFC, what);
  CUtensorMap map_w2 = sm90_slab_map(a.dtype, a.W2, a.N, a.F, a.F, 128, what);
  FfnKernelArgs k{a.b1, a.b2, a.R, a.gamma, a.beta, a.Y, static_cast<int>(a.M), static_cast<int>(a.F), a.eps,
                  a.param_dtype == DType::F32 ? 1 : 0, a.ordered ? 1 : 0};
  void* args[] = {&map_x, &map_w1, &map_w2, &k};
  sm90_launch(kernel_for(a.dtype, nb, gelu_f16x2_on(a.dtype)), static_cast<unsigned>((a.M + kBM - 1) / kBM), kThreads,
              smem_bytes_of(nb), stream, args, what);
}

}  // namespace rlx::cuda
