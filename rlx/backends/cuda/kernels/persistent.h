// The persistent decode kernel (kernels/persistent.cu): one launch runs a
// whole stretch of a decode step's schedule (norms, quantized GEMVs, RoPE +
// KV-cache writes, split-KV attention) as a list of ops, with one CTA per SM
// and grid-wide barriers between dependent ops instead of kernel boundaries.
//
// Why: a Gemma 3 270M decode step is ~150 launches of kernels that each take
// 2-3 µs on the critical path (griddepcontrol.wait, one L2 round trip for the
// activations, a few hundred ns of work) although the step's weights need
// ~60 µs of DRAM time. In the persistent kernel a CTA issues the next op's
// weight loads, then waits at the barrier, so only the barrier and the
// activation read stay on the critical path (docs/architecture.md,
// "Persistent decode segments"). Measured so far, its ops take 4-24 µs each
// and the whole step runs slower than the per-op kernels, so it is opt-in
// (RLX_CUDA_PERSISTENT; docs/performance.md, nineteenth session).
//
// Two kinds of op:
//   distributed  each CTA does its share (GEMV rows, attention key chunks,
//                rope heads) and writes it to global memory; readers in other
//                CTAs see it after the next barrier;
//   local        every CTA computes the whole (small) result itself — norms,
//                elementwise ops and casts of one row, the attention merge —
//                keeps it in a shared-memory slot (rounded to the output's
//                storage dtype, as a reader of the global tensor would see
//                it), and CTA 0 also writes it to global memory. An op that
//                reads a slot's value needs no barrier after its producer.
// The host (persistent.cpp) decides where barriers go and which inputs come
// from slots; this file only defines the table both sides read.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

inline constexpr int kPersistentThreads = 256;
inline constexpr int kPersistentSlots = 4;         // local results kept in shared memory at once
inline constexpr int kPersistentMaxLocal = 8192;   // elements of one local result
inline constexpr int kPersistentMaxGemvK = 16384;  // GEMV inner size (x staged in shared memory as f32)

enum class PKind : int32_t {
  Gemv,       // distributed: y = x · Wᵀ (m = 1), optionally a GLU of the stacked halves
  PostNorm,   // local: y = x + rms(a)·w1 [; h = rms(y)·w2]
  RmsNorm,    // local: y = rms(x [+ r])·w
  Binary,     // local: y = a ∘ b (b broadcast by period)
  Cast,       // local: y = x in another float dtype
  Glu,        // local: y = act(x[:n]) · x[n:] (FusedGeGLU / FusedSwiGLU of one row)
  RopeQkv,    // distributed: rope (+ head norm) of q → y, of k → k cache row, v → v cache row
  Attention,  // distributed: split-KV partials of one decode query
  AttnMerge,  // local: the partials merged into the attention output
};

// Storage dtypes of activations: 0 f32, 1 f16, 2 bf16 (as quant_detail::FloatKind).
enum class PFloat : int32_t { F32 = 0, F16 = 1, BF16 = 2 };

struct PIn {
  const void* ptr = nullptr;  // global memory
  int32_t slot = -1;          // ≥ 0: read the value from this shared-memory slot instead
  PFloat dtype = PFloat::F32;
};
struct POut {
  void* ptr = nullptr;
  int32_t slot = -1;  // local ops: the slot that keeps the value (always ≥ 0 once fused)
  PFloat dtype = PFloat::F32;
};

struct PGemv {
  const uint8_t* w;  // [n, k] GGUF rows (or f32/f16/bf16 rows)
  int32_t wtype;     // rlx::DType
  int32_t glu;       // -1, or GluKind: W stacks [gate; up] and y [n/2] = act(gate)·up
  int64_t n, k, row_bytes;
  int64_t items_per_cta;  // output elements (GLU: pairs) per CTA, contiguous
};

struct PNorm {
  int32_t cols;
  float eps;
  const void* w1;  // [cols], dtype wdt
  const void* w2;  // PostNorm pair: the second norm's weight, else null
  PFloat wdt;
};

enum class PBinFn : int32_t { Add, Sub, Mul, Div };
struct PGlu {
  int32_t kind;  // GluKind
  int64_t n;     // output elements (the input has 2n)
};
struct PBinary {
  PBinFn fn;
  int64_t n;         // output elements
  int64_t b_period;  // b[i % b_period] (= n: same shape; 1: scalar)
};

struct PRope {
  // q heads [0, qh), k heads [qh, qh + kh) (rotated into the k cache), v heads
  // [qh + kh, qh + 2kh) (copied into the v cache); each CTA takes heads
  // blockIdx.x, blockIdx.x + gridDim.x, ...
  int32_t q_heads, kv_heads, head_dim, n_rot;
  int32_t neox;
  int64_t q_off, k_off, v_off;  // column of the first q / k / v head in the source rows
  const double* inv_freq;       // [n_rot / 2] (device)
  double freq_scale;
  const void* q_norm;  // [head_dim] or null
  const void* k_norm;
  PFloat q_norm_dt, k_norm_dt;
  float q_eps, k_eps;
  const int32_t* position;   // i32 [1]
  const int32_t* cache_pos;  // i32 [1]
  int64_t capacity;          // cache rows
  PFloat cache_dt;
};

struct PAttn {
  int32_t H, Hkv, D, chunk;  // chunk: keys per work item
  int32_t max_chunks;        // per kv head (capacity / chunk, rounded up)
  float scale, scale_log2, softcap, softcap_log2;
  int32_t causal;
  int64_t window;
  int64_t k_stride, v_stride;      // cache row strides (elements)
  const int32_t* kv_len;           // i32 [1], a program input
  const int32_t* kv_stable;        // i32 [1] program input: cache rows below it are earlier steps' (or null)

  PFloat kv_dt;
  float* part_o;   // [Hkv][max_chunks][G][D] unnormalized outputs
  float* part_ml;  // [Hkv][max_chunks][G][2] (max in log2 units, sum)
};

struct POp {
  PKind kind = PKind::Gemv;
  int32_t barrier = 0;  // grid barrier before this op (after its weight prefetch)
  // Gemv: x; PostNorm: x, a; RmsNorm: x, r (r.ptr null: none); Binary: a, b;
  // Cast: x; RopeQkv: the q, k and v source rows; Attention: q, k cache, v cache.
  PIn in[3];
  // Gemv, Binary, Cast, RmsNorm, AttnMerge: y; PostNorm: y, h; RopeQkv: the
  // rotated q, the k cache, the v cache.
  POut out[3];
  int32_t* error_flag = nullptr;  // RopeQkv: a cache offset outside the cache
  union {
    PGemv gemv;
    PNorm norm;
    PBinary bin;
    PGlu glu;
    PRope rope;
    PAttn attn;
  };
  POp() : gemv{} {}
};

// Error codes the kernel ORs into PersistentLaunch::error_flag.
inline constexpr int32_t kPersistentTimeout = 8;  // a grid barrier waited past its limit: CTAs not co-resident

struct PersistentLaunch {
  const POp* ops = nullptr;  // device
  int32_t n_ops = 0;
  uint32_t* sync = nullptr;  // 2 device words, zero between launches (barrier counter, exits)
  int32_t* error_flag = nullptr;
  int32_t slot_elems = 0;    // floats per shared-memory slot (a multiple of 4)
  size_t scratch_bytes = 0;  // the largest persistent_scratch_bytes of the ops
  int grid = 0;              // CTAs: at most one per SM
  // RLX_CUDA_PERSISTENT_PROFILE: [2·n_ops + 1] u64; CTA 0 adds each op's
  // nanoseconds (its critical path), then each op's barrier wait, and last 1 per launch.
  unsigned long long* profile = nullptr;
};

// Shared memory one op needs besides the slots (GEMV x staging, attention
// tiles), in bytes; 0 when it needs none.
size_t persistent_scratch_bytes(const POp& op);
// Dynamic shared memory of a launch.
size_t persistent_smem_bytes(const PersistentLaunch& l);
// Why the current device cannot run the kernel (compute capability below 9.0,
// no sm_90 image in this build), or null when it can.
const char* persistent_unsupported();
// Whether the kernel's GEMV takes W [n, k] of this type at this address: a
// unit decoder (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS) whose wide loads
// fit W's alignment and stay inside it, or f32/f16/bf16 rows of 16 bytes.
bool persistent_gemv_takes(DType wtype, const void* w, int64_t n, int64_t k);
void launch_persistent(const PersistentLaunch& l, cudaStream_t stream);

}  // namespace rlx::cuda
