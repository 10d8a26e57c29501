// Hopper (sm_90a) warpgroup MMA and TMA helpers shared by rlx's wgmma GEMMs
// (kernels/gemm_sm90.cu: f16/bf16 operands by TMA; kernels/qgemm_sm90.cu:
// GGUF weights dequantized into shared memory by a producer warpgroup).
//
// All of them compute 128 × 128 C tiles with wgmma m64n128k16, K in slabs of
// 64 (one 128-byte swizzle atom per row), A and B K-major in shared memory
// with the 128-byte swizzle (16-byte chunk c of row r at c ^ (r mod 8),
// stages 1024-byte aligned). The classic and quantized GEMMs split a CTA's
// tile between two consumer warpgroups (64 rows each) and write it with
// 16-byte stores from a staged copy; the ping-pong GEMM gives each consumer
// warpgroup whole tiles and stores them by TMA (stmatrix, tma_store_2d).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"

namespace rlx::cuda::dev {

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

// d += A·B for one k16 step with B 64 × 16 (wgmma n64), both from shared
// memory: d holds 32 floats per thread, laid out as the n128 form's first half.
#define RLX_WGMMA_D32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define RLX_WGMMA_D32_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
#ifdef RLX_SM90A_DEVICE
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(RLX_WGMMA_ASM("m64n64k16", "f16", RLX_WGMMA_D32_REGS, 32, 33, 34)
                 : RLX_WGMMA_D32_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
  else
    asm volatile(RLX_WGMMA_ASM("m64n64k16", "bf16", RLX_WGMMA_D32_REGS, 32, 33, 34)
                 : RLX_WGMMA_D32_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
#endif
}

// d += A·B for one k16 step with B 192 × 16 (wgmma n192), both from shared
// memory: d holds 96 floats per thread, laid out as the n128 form's.
#define RLX_WGMMA_D96_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define RLX_WGMMA_D96_OPERANDS \
    RLX_WGMMA_D64_OPERANDS, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
template <typename T>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t da, uint64_t db, int accumulate) {
#ifdef RLX_SM90A_DEVICE
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(RLX_WGMMA_ASM("m64n192k16", "f16", RLX_WGMMA_D96_REGS, 96, 97, 98)
                 : RLX_WGMMA_D96_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
  else
    asm volatile(RLX_WGMMA_ASM("m64n192k16", "bf16", RLX_WGMMA_D96_REGS, 96, 97, 98)
                 : RLX_WGMMA_D96_OPERANDS : "l"(da), "l"(db), "r"(accumulate));
#endif
}

// d += A·B for one k16 step with A (64 × 16) from registers: thread lane of
// warp w holds rows 16w + g and 16w + g + 8 (g = lane / 4) at columns 2t, 2t + 1
// (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3]), t = lane mod 4, as pairs of T;
// B 128 × 16 from shared memory. The registers are read asynchronously: they
// must keep their values until a wgmma_wait() has retired this wgmma.
#define RLX_WGMMA_RS_ASM(ty)                                                                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " " \
  RLX_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %69, p, 1, 1, 0;\n}\n"
// One register-A wgmma in T's PTX type name (f16 or bf16): ASM(type) is the
// instruction text, D its accumulator operands.
#define RLX_WGMMA_RS_CALL(ASM, D)                                                                       \
  if constexpr (std::is_same_v<T, __half>)                                                              \
    asm volatile(ASM("f16") : D : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(db)); \
  else                                                                                                  \
    asm volatile(ASM("bf16") : D : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(db))
template <typename T>
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int accumulate) {
#ifdef RLX_SM90A_DEVICE
  RLX_WGMMA_RS_CALL(RLX_WGMMA_RS_ASM, RLX_WGMMA_D64_OPERANDS);
#endif
}

// The same with B 256 × 16 (wgmma n256): d holds 128 floats per thread,
// fragment i at row 16·warp + g (+8 for i % 4 ≥ 2), column 8·(i / 4) + 2t + i % 2.
#define RLX_WGMMA_D128_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define RLX_WGMMA_D128_OPERANDS \
    RLX_WGMMA_D64_OPERANDS, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define RLX_WGMMA_RS256_ASM(ty)                                                                           \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\nwgmma.mma_async.sync.aligned.m64n256k16.f32." ty "." ty " " \
  RLX_WGMMA_D128_REGS ", {%128, %129, %130, %131}, %133, p, 1, 1, 0;\n}\n"
template <typename T>
__device__ __forceinline__ void wgmma_rs_m64n256k16(float (&d)[128], const uint32_t (&a)[4], uint64_t db,
                                                    int accumulate) {
#ifdef RLX_SM90A_DEVICE
  RLX_WGMMA_RS_CALL(RLX_WGMMA_RS256_ASM, RLX_WGMMA_D128_OPERANDS);
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
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
#endif
}

// Warp-specialized kernels: a warpgroup hands registers back (producers) or
// takes them (consumers); every thread of the warpgroup executes it, and
// ptxas allocates the code after it within the new count.
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}

// TMA store: the box at element coordinates (c0 fastest, c1) of a 2-D tensor
// map from shared memory (laid out as the map's swizzle says); elements past
// the tensor's bounds are not written. Completion is tracked per thread in
// bulk groups: commit them, then wait until their reads of shared memory are
// done (the buffer may be rewritten) or until the writes are done.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(smem_u32(src))
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_wait_read_all() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_wait_all() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// Four 8 × 8 matrices of 16-bit pairs into shared memory: lanes 8m..8m+7
// give the row addresses of matrix m, and register r[m] of lane l holds row
// l / 4, columns 2·(l mod 4) and +1 of matrix m (the MMA accumulator layout).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
#endif
}

// The inverse of stmatrix_x4: the same lane addresses, the same register layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#else
  r[0] = r[1] = r[2] = r[3] = addr;
#endif
}

// A barrier among `threads` threads (a multiple of 32) under id 1..15
// (0 is __syncthreads'): lets one warpgroup synchronize without the others.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}

// Arrives on named barrier `id` without waiting: with named_barrier_sync by
// the other `threads` − (these) threads, one warpgroup lets another go on.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}

constexpr int kWgmmaTileM = 128, kWgmmaTileN = 128, kWgmmaSlabK = 64;
constexpr int kWgmmaOutStride = kWgmmaTileN + 8;  // staged C row, elements: conflict-free fragment writes

// Writes the consumer warpgroups' accumulators, transformed by f(value, column
// in the tile), as T pairs into the staged C tile `sC` (kWgmmaTileM rows of
// kWgmmaOutStride elements). Fragment i of warp `warp`: row 16·warp + g (+8
// for i % 4 ≥ 2), column 8·(i / 4) + 2·t4 + i % 2.
template <typename T, typename F>
__device__ __forceinline__ void stage_c_tile(const float (&acc)[64], uint32_t* sC, int wg, int warp, int lane, F&& f) {
  const int g = lane >> 2, t4 = lane & 3;
  const int row0 = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int j = 0; j < kWgmmaTileN / 8; ++j) {
    const int col = 8 * j + 2 * t4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sC[((row0 + 8 * h) * kWgmmaOutStride + col) / 2] =
          pack2<T>(f(acc[4 * j + 2 * h], col), f(acc[4 * j + 2 * h + 1], col + 1));
  }
}

// The staged tile → C [M, N] (leading dimension ldc) at (m0, n0) with 16-byte
// stores by threads [0, threads); rows past M and columns past N skipped (N a
// multiple of 8).
template <typename T>
__device__ __forceinline__ void store_c_tile(const T* sC, T* C, int64_t ldc, int m0, int n0, int M, int N, int tid,
                                             int threads) {
  const int rows = min(kWgmmaTileM, M - m0);
  for (int idx = tid; idx < kWgmmaTileM * kWgmmaTileN / 8; idx += threads) {
    const int r = idx >> 4, c = (idx & 15) * 8;
    if (r < rows && n0 + c < N)
      *reinterpret_cast<uint4*>(C + static_cast<int64_t>(m0 + r) * ldc + n0 + c) =
          *reinterpret_cast<const uint4*>(sC + r * kWgmmaOutStride + c);
  }
}

// Thread-block clusters (sm_90): this CTA's rank, a barrier of every thread of
// the cluster (release/acquire: shared-memory writes before it are visible
// after it), and stores into another CTA's shared memory (DSMEM).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#ifdef RLX_SM90A_DEVICE
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
__device__ __forceinline__ void cluster_sync() {
#ifdef RLX_SM90A_DEVICE
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// The shared::cluster address of `smem_addr` (a shared::cta address) in CTA `rank`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t smem_addr, uint32_t rank) {
  uint32_t r = 0;
#ifdef RLX_SM90A_DEVICE
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(rank));
#endif
  return r;
}
__device__ __forceinline__ void cluster_store4(uint32_t addr, float a, float b, float c, float d) {
#ifdef RLX_SM90A_DEVICE
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
#endif
}

}  // namespace rlx::cuda::dev
