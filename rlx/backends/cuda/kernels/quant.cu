// Quantized weights: dequantization and the quantized-table gather (the
// fused GEMV is in gemv.cu).
//
// Every kernel is a template over one decoder from device/quant_blocks.cuh,
// which turns (block, chunk) into kChunk consecutive floats (32 for block
// types), so the kernels share one implementation of each layout.
//   dequantize: one (block, chunk) unit per thread-iteration, grid-stride;
//     consecutive threads decode consecutive units, so a warp reads a
//     contiguous run of blocks; the 32 outputs leave as 16-byte stores.
//   gather: one block per looked-up row, threads over the row's units.
#include "rlx/backends/cuda/kernels/quant.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/vec.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/core/error.h"
#include "rlx/formats/quant_tables.h"

namespace rlx::cuda {
namespace quant_detail {

// ---- IQ tables, one copy per device -----------------------------------------

template <typename T, size_t N>
void append(std::vector<uint8_t>& blob, const T (&table)[N], size_t* offset) {
  *offset = (blob.size() + 15) / 16 * 16;
  blob.resize(*offset + sizeof table);
  std::memcpy(blob.data() + *offset, table, sizeof table);
}

dev::IqTables tables_for_current_device() {
  static std::mutex mu;
  static std::map<int, dev::IqTables> staged;
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mu);
  if (auto it = staged.find(device); it != staged.end()) return it->second;

  namespace g = ggml_tables;
  std::vector<uint8_t> blob;
  size_t o[9];
  append(blob, g::iq2xxs_grid, &o[0]);
  append(blob, g::iq2xs_grid, &o[1]);
  append(blob, g::iq2s_grid, &o[2]);
  append(blob, g::iq3xxs_grid, &o[3]);
  append(blob, g::iq3s_grid, &o[4]);
  append(blob, g::iq1s_grid, &o[5]);
  append(blob, g::ksigns_iq2xs, &o[6]);
  append(blob, g::kvalues_iq4nl, &o[7]);
  append(blob, g::kvalues_mxfp4, &o[8]);
  // Lives as long as the process (like a module's __device__ globals).
  uint8_t* d = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&d, blob.size()));
  RLX_CUDA_CHECK(cudaMemcpy(d, blob.data(), blob.size(), cudaMemcpyHostToDevice));
  dev::IqTables t;
  t.iq2xxs_grid = reinterpret_cast<const uint64_t*>(d + o[0]);
  t.iq2xs_grid = reinterpret_cast<const uint64_t*>(d + o[1]);
  t.iq2s_grid = reinterpret_cast<const uint64_t*>(d + o[2]);
  t.iq3xxs_grid = reinterpret_cast<const uint32_t*>(d + o[3]);
  t.iq3s_grid = reinterpret_cast<const uint32_t*>(d + o[4]);
  t.iq1s_grid = reinterpret_cast<const uint64_t*>(d + o[5]);
  t.ksigns_iq2xs = d + o[6];
  t.kvalues_iq4nl = reinterpret_cast<const int8_t*>(d + o[7]);
  t.kvalues_mxfp4 = reinterpret_cast<const int8_t*>(d + o[8]);
  staged.emplace(device, t);
  return t;
}

}  // namespace quant_detail

namespace {

using namespace quant_detail;
using dev::IqTables;
using dev::QuantBlock;

// ---- dequantize ----------------------------------------------------------------

template <class Q, typename TO>
__global__ void __launch_bounds__(256)
    dequant_kernel(const uint8_t* __restrict__ src, TO* __restrict__ dst, int64_t units, bool vec_ok, IqTables t) {
  dev::pdl_begin();
  constexpr int kPer = Q::kBlockElems / Q::kChunk;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[Q::kChunk];
    Q::decode(src + (u / kPer) * Q::kBlockBytes, static_cast<int>(u % kPer), t, v);
    TO* o = dst + u * Q::kChunk;
    constexpr int kVec = 16 / sizeof(TO);
    if constexpr (Q::kChunk % kVec == 0) {
      if (vec_ok) {
#pragma unroll
        for (int i = 0; i < Q::kChunk; i += kVec) {
          float part[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) part[j] = v[i + j];
          dev::store_f32<TO, kVec>(o + i, part);
        }
        continue;
      }
    }
#pragma unroll
    for (int i = 0; i < Q::kChunk; ++i) o[i] = dev::from_f32<TO>(v[i]);
  }
}

// The types with a dev::GemvUnit: one unit per thread-iteration, so a warp's
// loads cover contiguous bytes with wide loads (as in the GEMV); its runs of
// 8 or 16 values leave as 16-byte stores.
template <class U, typename TO>
__global__ void __launch_bounds__(256)
    dequant_unit_kernel(const uint8_t* __restrict__ src, TO* __restrict__ dst, int64_t units, bool vec_ok,
                        IqTables t) {
  dev::pdl_begin();
  const typename U::Ctx ctx = U::context(t);
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = u / U::kUnits;
    const int j = static_cast<int>(u % U::kUnits);
    float v[U::kRuns][U::kRunLen];
    U::values(U::load(src + b * U::kBlockBytes, j), ctx, v);
#pragma unroll
    for (int r = 0; r < U::kRuns; ++r) {
      TO* o = dst + b * U::kBlockElems + U::run_start(j, r);
      constexpr int kVec = 16 / sizeof(TO);
      static_assert(U::kRunLen % kVec == 0, "runs start at multiples of 8 elements");
      if (vec_ok) {
#pragma unroll
        for (int i = 0; i < U::kRunLen; i += kVec) {
          float part[kVec];
#pragma unroll
          for (int e = 0; e < kVec; ++e) part[e] = v[r][i + e];
          dev::store_f32<TO, kVec>(o + i, part);
        }
      } else {
#pragma unroll
        for (int i = 0; i < U::kRunLen; ++i) o[i] = dev::from_f32<TO>(v[r][i]);
      }
    }
  }
}

// ---- gather ------------------------------------------------------------------------

template <class Q>
__global__ void __launch_bounds__(128)
    quant_gather_kernel(const uint8_t* __restrict__ table, int64_t rows, int64_t row_bytes, int64_t row_elems,
                        const void* __restrict__ idx, bool idx64, float* __restrict__ y, int32_t* error_flag,
                        IqTables t) {
  dev::pdl_begin();
  constexpr int kPer = Q::kBlockElems / Q::kChunk;
  const int64_t j = blockIdx.x;
  const int64_t id = idx64 ? static_cast<const int64_t*>(idx)[j] : static_cast<const int32_t*>(idx)[j];
  float* out = y + j * row_elems;
  const int64_t units = row_elems / Q::kChunk;
  if (id < 0 || id >= rows) {
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) out[i] = 0.0f;
    if (threadIdx.x == 0 && error_flag) atomicOr(error_flag, kErrIndexOutOfRange);
    return;
  }
  const uint8_t* src = table + id * row_bytes;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float v[Q::kChunk];
    Q::decode(src + (u / kPer) * Q::kBlockBytes, static_cast<int>(u % kPer), t, v);
#pragma unroll
    for (int i = 0; i < Q::kChunk; ++i) out[u * Q::kChunk + i] = v[i];
  }
}

}  // namespace

bool has_cuda_dequant_kernel(DType type) {
  return dev::visit_quant_block(type, [](auto) {});
}

void stage_quant_tables() { (void)tables_for_current_device(); }

void launch_dequantize(DType type, const void* src, DType out_dtype, void* out, int64_t n, cudaStream_t stream) {
  const int64_t block = dtype_info(type).block_elems;
  RLX_CHECK(n >= 0 && n % block == 0, "dequantize (cuda): ", n, " elements of ", dtype_name(type),
            " is not a multiple of its block of ", block);
  if (n == 0) return;
  const IqTables t = tables_for_current_device();
  const bool vec_ok = reinterpret_cast<uintptr_t>(out) % 16 == 0;
  bool done = false;
  dev::visit_gemv_unit(type, [&](auto u) {
    using U = decltype(u);
    if (reinterpret_cast<uintptr_t>(src) % U::kAlign != 0) return;
    const int64_t units = n / U::kBlockElems * U::kUnits;
    dispatch_float(out_dtype, "dequantize (cuda)", [&](auto o) {
      using TO = decltype(o);
      dequant_unit_kernel<U, TO><<<grid_for(units, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(src),
                                                                          static_cast<TO*>(out), units, vec_ok, t);
    });
    done = true;
  });
  if (!done) visit_or_throw(type, "dequantize (cuda)", [&](auto q) {
    using Q = decltype(q);
    const int64_t units = n / Q::kChunk;
    dispatch_float(out_dtype, "dequantize (cuda)", [&](auto o) {
      using TO = decltype(o);
      dequant_kernel<Q, TO><<<grid_for(units, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(src),
                                                                      static_cast<TO*>(out), units, vec_ok, t);
    });
  });
  RLX_CUDA_CHECK_LAUNCH("dequantize");
}

void launch_quant_gather(DType type, const void* table, int64_t rows, int64_t row_elems, DType index_dtype,
                         const void* idx, int64_t n_idx, float* y, int32_t* error_flag, cudaStream_t stream) {
  const int64_t block = dtype_info(type).block_elems;
  RLX_CHECK(row_elems > 0 && row_elems % block == 0, "gather (cuda): rows of ", row_elems, " elements are not whole ",
            dtype_name(type), " blocks of ", block);
  RLX_CHECK(index_dtype == DType::I32 || index_dtype == DType::I64, "gather (cuda): indices must be i32 or i64, got ",
            dtype_name(index_dtype));
  RLX_CHECK(n_idx < (int64_t{1} << 31), "gather (cuda): ", n_idx, " indices is too many for one launch");
  if (n_idx == 0) return;
  const IqTables t = tables_for_current_device();
  const int64_t row_bytes = dtype_bytes(type, row_elems);
  visit_or_throw(type, "gather (cuda)", [&](auto q) {
    using Q = decltype(q);
    quant_gather_kernel<Q><<<static_cast<unsigned>(n_idx), 128, 0, stream>>>(
        static_cast<const uint8_t*>(table), rows, row_bytes, row_elems, idx, index_dtype == DType::I64, y,
        error_flag, t);
  });
  RLX_CUDA_CHECK_LAUNCH("Gather (quantized table)");
}

}  // namespace rlx::cuda
