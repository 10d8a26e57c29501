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
#include "rlx/backends/cuda/device/wgmma.cuh"

namespace rlx::cuda {
namespace {

using namespace dev;  // the wgmma helpers (device/wgmma.cuh)

constexpr int kBM = kWgmmaTileM, kBN = kWgmmaTileN, kBK = kWgmmaSlabK, kThreads = 256, kWarps = kThreads / 32;
constexpr int kStages = 3;
constexpr int kTileBytes = kBM * kBK * 2;  // one operand's slab: 16 KB (kBM == kBN)
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kOutStride = kWgmmaOutStride;
// Stages, their 2·kStages mbarriers, and slack to align the stages to 1024 bytes.
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
static_assert(kBM * kOutStride * 2 <= kStages * kStageBytes, "the staged C tile reuses the stages");

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

  uint32_t* sC = reinterpret_cast<uint32_t*>(smem);
  stage_c_tile<T>(acc, sC, wg, warp, lane, [&](float v, int col) {
    const float b = bias != nullptr && n0 + col < N ? to_f32(bias[n0 + col]) : 0.0f;
    return epilogue_act<kAct>(v + b);
  });
  __syncthreads();
  store_c_tile(reinterpret_cast<const T*>(smem), C, ldc, m0, n0, M, N, tid, kThreads);
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

CUtensorMap tile_map(const GemmArgs& a, const void* p, int64_t rows, int64_t ld, int box_rows) {
  return sm90_slab_map(a.dtype, p, rows, a.K, ld, box_rows, str("sm90 gemm ", GemmEngine::describe(a)));
}

}  // namespace

// cuTensorMapEncodeTiled through the runtime's driver entry point (the
// library does not link libcuda; see CMakeLists.txt).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiled encode_tiled() {
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

bool sm90_device(int device) {
  int major = 0, minor = 0;
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0 && encode_tiled() != nullptr;
  (void)cudaGetLastError();
  return ok;
}

bool sm90_kernel_loads(const void* kernel, int smem_bytes) {
  cudaFuncAttributes attr{};
  const bool ok = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90 &&
                  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) == cudaSuccess;
  (void)cudaGetLastError();  // a refused query is an answer, not a sticky error
  return ok;
}

CUtensorMap sm90_slab_map(DType dtype, const void* p, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                          const std::string& what) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld * 2)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(
      &m, dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(p), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError(str(what, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ")"));
  return m;
}

CUtensorMap sm90_byte_rows_map(const void* p, int64_t rows, int64_t row_bytes, int box_rows, int box_bytes,
                               const std::string& what) {
  CUtensorMap m;
  // 4-byte elements: a box's inner extent is at most 256 elements.
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes / 4), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / 4), static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<void*>(p), dims, strides, box,
                                    unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError(str(what, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ")"));
  return m;
}

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
  bool ok = sm90_device(device);
  for (DType t : {DType::F16, DType::BF16})
    for (Activation act : {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::Relu, Activation::Silu})
      ok = ok && sm90_kernel_loads(kernel_for(t, act), kSmemBytes);
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
