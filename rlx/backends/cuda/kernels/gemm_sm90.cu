// rlx's Hopper GEMM: C[M, N] = act(A[M, K]·B[N, K]ᵀ + bias[N]), f16/bf16 in and
// out, f32 accumulation in registers (wgmma), activation and bias applied to
// the f32 accumulator before the one rounding to the output dtype.
//
// Tiling. A CTA of two warpgroups owns a 128 × 128 tile of C; warpgroup w
// computes rows 64w..64w+63 with wgmma m64n128k16, both reading the same B
// tile from shared memory. K advances in slabs of 64 (128 bytes of a row: one
// 128-byte swizzle atom), four k16 steps each. Three stages of 32 KB: two
// CTAs share an SM, so one CTA's epilogue (the activation math and the
// stores) can overlap the other's MMAs. (Measured on the H200 and dropped:
// 128 × 256 tiles, 4 stages, one CTA per SM: 20-40% slower on BERT's shapes;
// a persistent grid storing straight from registers, with or without every
// other CTA starting late: 20-45% slower.)
//
// Loads. Thread 0 issues each slab as two TMA tile copies (tensor maps made
// on the host: 128-byte swizzle, out-of-bounds rows and columns zero-filled)
// that count their bytes off on the stage's `full` mbarrier. Every warp
// arrives on the stage's `empty` mbarrier once its wgmmas reading the stage
// have completed; thread 0 waits for all eight before refilling the stage
// with the slab three ahead. One wgmma group stays in flight (wait_group 1),
// so the tensor cores do not wait for the issue of the next.
//
// Shared layout. The tiles are K-major with the 128-byte swizzle the wgmma
// descriptors name: 8-row groups 1024 bytes apart (the stride byte offset),
// the k16 step advancing the start address by 32 bytes (the hardware XORs
// absolute address bits, hence 1024-byte-aligned stages).
//
// Epilogue. Accumulators (+ bias, activation) are rounded in pairs and
// staged through shared memory (rows padded by 16 bytes: conflict-free
// fragment writes), then written with coalesced 16-byte stores, rows past M
// and columns past N skipped.
#include "rlx/backends/cuda/kernels/gemm_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <mutex>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/activation.cuh"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"

namespace rlx::cuda {
namespace {

constexpr int kBM = 128, kBK = 64, kThreads = 256, kWarps = kThreads / 32;

constexpr int kBN = 128, kStages = 3;
constexpr int kTileBytes = kBM * kBK * 2;  // one operand's slab: 16 KB (kBM == kBN)
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kOutStride = kBN + 8;  // staged C row, elements: conflict-free fragment writes
// Stages, their 2·kStages mbarriers, and slack to align the stages to 1024 bytes.
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
static_assert(kBM * kOutStride * 2 <= kStages * kStageBytes, "the staged C tile reuses the stages");

#define RLX_WGMMA_D64_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define RLX_WGMMA_D64_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define RLX_WGMMA_ASM(shape, ty, regs, ia, ib, ip)                                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" #ip ", 0;\nwgmma.mma_async.sync.aligned." shape ".f32." ty "." ty \
  " " regs ", %" #ia ", %" #ib ", p, 1, 1, 0, 0;\n}\n"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RLX_SM90A_DEVICE 1
#endif

// wgmma shared-memory descriptor of a K-major, 128-byte-swizzled tile.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr) {
  uint64_t d = (smem_addr & 0x3FFFF) >> 4;  // start address
  d |= uint64_t{1} << 16;                   // leading byte offset (unused by swizzled K-major)
  d |= uint64_t{1024 >> 4} << 32;           // stride byte offset: 8 rows × 128 bytes
  d |= uint64_t{1} << 62;                   // 128-byte swizzle
  return d;
}

// d += A·B for one k16 step: A 64 × 16, B 128 × 16, both from shared memory;
// accumulate = 0 overwrites d.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
#ifdef RLX_SM90A_DEVICE
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(RLX_WGMMA_ASM("m64n128k16", "f16", RLX_WGMMA_D64_REGS, 64, 65, 66)
                 : RLX_WGMMA_D64_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
  else
    asm volatile(RLX_WGMMA_ASM("m64n128k16", "bf16", RLX_WGMMA_D64_REGS, 64, 65, 66)
                 : RLX_WGMMA_D64_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accumulator accesses across wgmma boundaries.
template <int R>
__device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// TMA: the tile at element coordinates (c0 fastest, c1) of a 2-D tensor map,
// counted off on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
#ifdef RLX_SM90A_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dev::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(dev::smem_u32(bar))
      : "memory");
#endif
}

template <Activation A>
__device__ __forceinline__ float epilogue_act(float x) {
  if constexpr (A == Activation::GeluErf) return dev::gelu_erf_16bit(x);
  else if constexpr (A == Activation::GeluTanh) return dev::gelu_tanh_f32(x);
  else if constexpr (A == Activation::Relu) return x < 0.0f ? 0.0f : x;  // NaN passes, as the unary kernel
  else if constexpr (A == Activation::Silu) return x * dev::sigmoid_f32(x);
  else return x;
}

template <typename T, Activation kAct>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     T* __restrict__ C, int64_t ldc, const T* __restrict__ bias, int M, int N, int K) {
  // Built for every target so its helpers are referenced; the PTX helpers
  // are empty off sm_90a, where sm90_gemm_available() keeps it from running.
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = dev::smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, m0 = static_cast<int>(blockIdx.y) * kBM;
  const int nk = (K + kBK - 1) / kBK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      dev::mbar_init(&full[s], 1);
      dev::mbar_init(&empty[s], kWarps);
    }
    dev::mbar_fence_init();
  }
  __syncthreads();
  dev::pdl_begin();  // A may be the previous kernel's output

  auto issue = [&](int kb) {
    const int s = kb % kStages;
    unsigned char* st = smem + s * kStageBytes;
    dev::mbar_arrive_expect_tx(&full[s], kStageBytes);
    tma_load_2d(st, &map_a, kb * kBK, m0, &full[s]);
    tma_load_2d(st + kTileBytes, &map_b, kb * kBK, n0, &full[s]);
  };
  if (tid == 0)
    for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);

  float acc[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;

  for (int kb = 0; kb < nk; ++kb) {
    const int s = kb % kStages;
    dev::mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
    const uint32_t st = dev::smem_u32(smem + s * kStageBytes);
    const uint64_t da = wgmma_desc(st + static_cast<uint32_t>(wg * 64 * 128));
    const uint64_t db = wgmma_desc(st + kTileBytes);
    wgmma_fence();
    pin(acc);
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k)  // +32 bytes per k16 step = +2 in the descriptor's address field
      wgmma_m64n128k16<T>(acc, da + 2 * k, db + 2 * k, kb > 0 || k > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous slab's group is done: release its stage
    pin(acc);
    if (kb > 0) {
      const int ps = (kb - 1) % kStages;
      if (lane == 0) dev::mbar_arrive(&empty[ps]);
      if (tid == 0 && kb - 1 + kStages < nk) {
        dev::mbar_wait(&empty[ps], static_cast<uint32_t>((kb - 1) / kStages) & 1);
        issue(kb - 1 + kStages);
      }
    }
  }
  wgmma_wait<0>();
  pin(acc);
  __syncthreads();  // every warpgroup is done reading the stages: reuse them for C

  // Fragment i of warp `warp`: row 16·warp + g (+8 for i % 4 ≥ 2), column 8·(i / 4) + 2·t4 + i % 2.
  uint32_t* sC = reinterpret_cast<uint32_t*>(smem);  // pairs; row stride kOutStride / 2 words
  const int g = lane >> 2, t4 = lane & 3;
  const int row0 = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = 8 * j + 2 * t4;
    float2 b = make_float2(0.0f, 0.0f);
    if (bias != nullptr && n0 + col < N) b = dev::unpack2<T>(*reinterpret_cast<const uint32_t*>(bias + n0 + col));
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sC[((row0 + 8 * h) * kOutStride + col) / 2] =
          dev::pack2<T>(epilogue_act<kAct>(acc[4 * j + 2 * h] + b.x), epilogue_act<kAct>(acc[4 * j + 2 * h + 1] + b.y));
  }
  __syncthreads();
  const T* sCt = reinterpret_cast<const T*>(smem);
  const int rows = min(kBM, M - m0);
#pragma unroll
  for (int it = 0; it < kBM * kBN / 8 / kThreads; ++it) {
    const int idx = tid + it * kThreads, r = idx >> 4, c = (idx & 15) * 8;
    if (r < rows && n0 + c < N)
      *reinterpret_cast<uint4*>(C + static_cast<int64_t>(m0 + r) * ldc + n0 + c) =
          *reinterpret_cast<const uint4*>(sCt + r * kOutStride + c);
  }
}

template <typename T>
const void* kernel_for(Activation act) {
  switch (act) {
    case Activation::None: return reinterpret_cast<const void*>(&gemm_sm90_kernel<T, Activation::None>);
    case Activation::GeluErf: return reinterpret_cast<const void*>(&gemm_sm90_kernel<T, Activation::GeluErf>);
    case Activation::GeluTanh: return reinterpret_cast<const void*>(&gemm_sm90_kernel<T, Activation::GeluTanh>);
    case Activation::Relu: return reinterpret_cast<const void*>(&gemm_sm90_kernel<T, Activation::Relu>);
    case Activation::Silu: return reinterpret_cast<const void*>(&gemm_sm90_kernel<T, Activation::Silu>);
  }
  return nullptr;
}

const void* kernel_for(DType t, Activation act) {
  return t == DType::F16 ? kernel_for<__half>(act) : kernel_for<__nv_bfloat16>(act);
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (the
// library does not link libcuda; see CMakeLists.txt).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// Row-major [rows, cols] with leading dimension ld, read as 64-column × box_rows tiles.
CUtensorMap tile_map(const GemmArgs& a, const void* p, int64_t rows, int64_t ld, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(a.K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld * 2)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(
      &m, a.dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(p), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError(str("sm90 gemm ", GemmEngine::describe(a), ": cuTensorMapEncodeTiled failed (CUresult ",
                          static_cast<int>(r), ")"));
  return m;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

const char* sm90_gemm_unsupported(const GemmArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.trans_a || !a.trans_b) return "needs A [M, K] and B [N, K] (trans_a = false, trans_b = true)";
  if (a.batch != 1) return "batched";
  if (a.M <= 0 || a.N <= 0 || a.K <= 0) return "empty";
  if ((a.M + kBM - 1) / kBM > 65535 || a.M > (int64_t{1} << 31) - kBM || a.N > (int64_t{1} << 30) ||
      a.K > (int64_t{1} << 30))
    return "too large";
  if (a.K % 8 || a.N % 8 || a.lda % 8 || a.ldb % 8 || a.ldc % 8) return "K, N or a leading dimension not a multiple of 8";
  if (a.lda < a.K || a.ldb < a.K || a.ldc < a.N) return "a leading dimension is shorter than its row";
  if (!aligned16(a.A) || !aligned16(a.B) || !aligned16(a.C)) return "an operand is not 16-byte aligned";
  if (a.bias != nullptr && (reinterpret_cast<uintptr_t>(a.bias) & 3)) return "bias not 4-byte aligned";
  return nullptr;
}

bool sm90_gemm_available(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard lock(mu);
  if (auto it = known.find(device); it != known.end()) return it->second;
  DeviceGuard guard(device);
  int major = 0, minor = 0;
  bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
            minor == 0 && encode_tiled() != nullptr;
  for (DType t : {DType::F16, DType::BF16})
    for (Activation act : {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::Relu, Activation::Silu}) {
      if (!ok) break;
      cudaFuncAttributes attr{};
      const void* k = kernel_for(t, act);
      ok = cudaFuncGetAttributes(&attr, k) == cudaSuccess && attr.binaryVersion == 90 &&
           cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) == cudaSuccess;
    }
  (void)cudaGetLastError();  // a refused query is an answer, not a sticky error
  known[device] = ok;
  return ok;
}

void launch_sm90_gemm(const GemmArgs& a, Activation act, cudaStream_t stream) {
  if (const char* why = sm90_gemm_unsupported(a))
    throw Unsupported(str("sm90 gemm: ", GemmEngine::describe(a), ": ", why));
  const dim3 grid(static_cast<unsigned>((a.N + kBN - 1) / kBN), static_cast<unsigned>((a.M + kBM - 1) / kBM));
  // Parameters: (CUtensorMap, CUtensorMap, T*, int64_t, const T*, int, int, int).
  CUtensorMap map_a = tile_map(a, a.A, a.M, a.lda, kBM), map_b = tile_map(a, a.B, a.N, a.ldb, kBN);
  void* C = a.C;
  const void* bias = a.bias;
  int64_t ldc = a.ldc;
  int M = static_cast<int>(a.M), N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  void* args[] = {&map_a, &map_b, &C, &ldc, &bias, &M, &N, &K};
  const cudaError_t err = cudaLaunchKernel(kernel_for(a.dtype, act), grid, dim3(kThreads), args, kSmemBytes, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(str("sm90 gemm ", GemmEngine::describe(a), " (", activation_name(act),
                          "): launch failed: ", cudaGetErrorString(err)));
  }
}

}  // namespace rlx::cuda
