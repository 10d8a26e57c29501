// GEMM + bias + residual + LayerNorm for N ≤ 384 (gemm_ln_sm90.h).
//
// A CTA of two warpgroups owns 128 rows and all N = 128·NB columns of Y:
// warpgroup w computes rows 64w..64w+63 with NB wgmma m64n128k16 per k16 step
// (NB·64 accumulators a thread, 192 at N = 384). K advances in slabs of 64 as
// in the classic GEMM (gemm_sm90.cu): thread 0 issues each slab as TMA copies
// of A's 128 rows and W's N rows (128-byte swizzle, out-of-bounds rows zero)
// into one of three stages counted on its `full` mbarrier; every warp
// arrives on the stage's `empty` mbarrier once its wgmmas have read it. CTA b
// walks the slabs from slab b mod (slabs) on, wrapping around.
//
// Epilogue (device/residual_ln.cuh, shared with the fused FFN): bias and R
// (prefetched into L2 when the CTA started, copied into the freed stages)
// added to the accumulators, each row normalized in registers, times gamma
// plus beta, staged and written with 16-byte stores. Y may be R.
#include "rlx/backends/cuda/kernels/gemm_ln_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
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

constexpr int kBM = 128, kBK = 64, kThreads = 256, kWarps = kThreads / 32, kStages = 3;
constexpr int kSlabBytes = kBM * kBK * 2;  // 16 KB: A's slab, or 128 rows of W's

template <int NB>
struct LnShape {
  static constexpr int N = 128 * NB;
  static constexpr int kStageBytes = (1 + NB) * kSlabBytes;
  // Stages, 2·kStages mbarriers, bias/gamma/beta as f32, slack to align the stages to 1024 bytes.
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 3 * N * 4 + 1024;
  static_assert(residual_ln_stage_bytes<NB>() <= kStages * kStageBytes, "the staged Y tile reuses the stages");
};

struct LnKernelArgs {
  const void* bias;
  const void* R;
  const void* gamma;
  const void* beta;
  void* Y;
  int M, K;
  float eps;
  int params_f32;
};

template <typename T>
__device__ __forceinline__ float param_at(const void* p, int c, int is_f32) {
  return is_f32 ? static_cast<const float*>(p)[c] : to_f32(static_cast<const T*>(p)[c]);
}

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

template <typename T, int NB>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_ln_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                   const LnKernelArgs p) {
  using S = LnShape<NB>;
  constexpr int N = S::N;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * S::kStageBytes);
  uint64_t* empty = full + kStages;
  float* s_bias = reinterpret_cast<float*>(empty + kStages);
  float* s_gamma = s_bias + N;
  float* s_beta = s_gamma + N;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, lane = tid & 31;
  const int m0 = static_cast<int>(blockIdx.x) * kBM;
  const int rows = min(kBM, p.M - m0);
  const int nk = (p.K + kBK - 1) / kBK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl_begin();  // A and R may be earlier kernels' outputs

  // Every CTA reads all of W. Each starts at another K slab (and wraps), so
  // the CTAs running at once spread their requests over W's slabs, where
  // from one start they would all ask L2 for the same lines at the same time.
  const int rot = static_cast<int>(blockIdx.x) % nk;
  auto issue = [&](int kb) {
    const int s = kb % kStages, k0 = (kb + rot < nk ? kb + rot : kb + rot - nk) * kBK;
    unsigned char* st = smem + s * S::kStageBytes;
    mbar_arrive_expect_tx(&full[s], S::kStageBytes);
    tma_load_2d(st, &map_a, k0, m0, &full[s]);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) tma_load_2d(st + (1 + nb) * kSlabBytes, &map_w, k0, nb * 128, &full[s]);
  };
  if (tid == 0) {
    for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);
    prefetch_l2(static_cast<const T*>(p.R) + static_cast<int64_t>(m0) * N, static_cast<uint32_t>(rows * N * 2));
  }
  for (int c = tid; c < N; c += kThreads) {
    s_bias[c] = p.bias != nullptr ? to_f32(static_cast<const T*>(p.bias)[c]) : 0.0f;
    s_gamma[c] = param_at<T>(p.gamma, c, p.params_f32);
    s_beta[c] = param_at<T>(p.beta, c, p.params_f32);
  }

  float acc[NB][64];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[nb][i] = 0.0f;

  for (int kb = 0; kb < nk; ++kb) {
    const int s = kb % kStages;
    mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
    const uint32_t st = smem_u32(smem + s * S::kStageBytes);
    const uint64_t da = wgmma_desc(st + static_cast<uint32_t>(wg * 64 * 128));
    wgmma_fence();
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) pin(acc[nb]);
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k)  // +32 bytes per k16 step = +2 in the descriptor's address field
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
        wgmma_m64n128k16<T>(acc[nb], da + 2 * k, wgmma_desc(st + static_cast<uint32_t>((1 + nb) * kSlabBytes)) + 2 * k,
                            kb > 0 || k > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous slab's group is done: release its stage
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) pin(acc[nb]);
    if (kb > 0) {
      const int ps = (kb - 1) % kStages;
      if (lane == 0) mbar_arrive(&empty[ps]);
      if (tid == 0 && kb - 1 + kStages < nk) {
        mbar_wait(&empty[ps], static_cast<uint32_t>((kb - 1) / kStages) & 1);
        issue(kb - 1 + kStages);
      }
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) pin(acc[nb]);
  __syncthreads();  // every wgmma has read its stages (reused by the epilogue); the parameters are staged

  residual_ln_store<T, NB>(acc, smem, static_cast<const T*>(p.R), static_cast<T*>(p.Y), m0, rows, s_bias, s_gamma,
                           s_beta, p.eps, tid, 1);
}

const void* kernel_for(DType t, int nb) {
  return by_column_blocks(nb, [t](auto c) {
    return t == DType::F16 ? reinterpret_cast<const void*>(gemm_ln_kernel<__half, c.value>)
                           : reinterpret_cast<const void*>(gemm_ln_kernel<__nv_bfloat16, c.value>);
  });
}
int smem_bytes_of(int nb) {
  return by_column_blocks(nb, [](auto c) { return LnShape<c.value>::kSmemBytes; });
}

}  // namespace

const char* sm90_gemm_ln_unsupported(const GemmLnArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.param_dtype != a.dtype && a.param_dtype != DType::F32) return "gamma/beta are neither the dtype nor f32";
  if (a.N != 128 && a.N != 256 && a.N != 384) return "N is not 128, 256 or 384";
  if (a.M <= 0 || a.K <= 0) return "empty";
  if (a.K % 8 != 0) return "K is not a multiple of 8";
  if (a.M > (int64_t{1} << 31) - kBM || a.K > (int64_t{1} << 30)) return "too large";
  if (a.A == nullptr || a.W == nullptr || a.R == nullptr || a.gamma == nullptr || a.beta == nullptr || a.Y == nullptr)
    return "a required operand is null";
  if (!sm90_aligned(a.A, 16) || !sm90_aligned(a.W, 16) || !sm90_aligned(a.R, 16) || !sm90_aligned(a.Y, 16))
    return "A, W, R or Y is not 16-byte aligned";
  const uintptr_t pe = a.param_dtype == DType::F32 ? 4 : 2;
  if (!sm90_aligned(a.gamma, pe) || !sm90_aligned(a.beta, pe) || (a.bias != nullptr && !sm90_aligned(a.bias, 2)))
    return "bias, gamma or beta is misaligned";
  return nullptr;
}

bool sm90_gemm_ln_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (int nb = 1; nb <= 3; ++nb)
      for (DType t : {DType::F16, DType::BF16})
        ok = ok && sm90_kernel_loads(kernel_for(t, nb), smem_bytes_of(nb), kThreads);
    return ok;
  });
}

void launch_sm90_gemm_ln(const GemmLnArgs& a, cudaStream_t stream) {
  const std::string what = str("sm90 gemm + layer_norm ", dtype_name(a.dtype), " M=", a.M, " N=", a.N, " K=", a.K);
  if (const char* why = sm90_gemm_ln_unsupported(a)) throw Unsupported(str(what, ": ", why));
  const int nb = static_cast<int>(a.N / 128);
  CUtensorMap map_a = sm90_slab_map(a.dtype, a.A, a.M, a.K, a.K, kBM, what);
  CUtensorMap map_w = sm90_slab_map(a.dtype, a.W, a.N, a.K, a.K, 128, what);
  LnKernelArgs k{a.bias, a.R, a.gamma, a.beta, a.Y, static_cast<int>(a.M), static_cast<int>(a.K), a.eps,
                 a.param_dtype == DType::F32 ? 1 : 0};
  void* args[] = {&map_a, &map_w, &k};
  sm90_launch(kernel_for(a.dtype, nb), static_cast<unsigned>((a.M + kBM - 1) / kBM), kThreads, smem_bytes_of(nb),
              stream, args, what);
}

}  // namespace rlx::cuda
