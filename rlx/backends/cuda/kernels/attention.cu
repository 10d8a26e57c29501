// Attention: argument checks, path choice, and the SIMT flash kernel that
// covers what the tensor-core kernels (attention_prefill.cu,
// attention_decode.cu) do not: f32 (reference precision), head dims other
// than 32/64/128/256 (any D ≤ 256), and 16-bit inputs whose rows are not
// 16-byte aligned.
//
// SIMT algorithm. One CTA of 8 warps serves 8 rows of one (batch, kv head)
// GQA group (row r = query r / G, head kvh·G + r % G), so the K/V it stages
// serve every query head that reads them. Keys go in tiles of 32: the CTA
// copies K and V (converted to f32) into shared memory, then each warp
//   scores:  lane j computes q · K[j] (q row broadcast from smem; K rows
//            padded to D + 1 floats so the 32 lanes hit 32 banks),
//   softmax: warp max / sum by shuffles, online rescale in the log2 domain,
//   P·V:     lane owns output dims lane + 32c; p_j is broadcast by shuffle,
//            V[j][d] read along d (conflict-free).
// f32 accumulation everywhere; no tensor cores, no async copies: simple and
// exact enough for the 1e-4 f32 tolerance.
//
// Memory plan. Q rows are read once into smem; each K/V element is read
// once per CTA (scalar loads, coalesced along D); the output row is written
// once by its warp, coalesced along D.
#include <algorithm>

#include "rlx/backends/cuda/kernels/attention.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/attention.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kSimtWarps = 8;
constexpr int kSimtKeys = 32;

size_t simt_smem_bytes(int D) {
  return static_cast<size_t>(kSimtWarps * D + kSimtKeys * (D + 1) + kSimtKeys * D) * sizeof(float);
}

// kChunks = ⌈D / 32⌉ output dims per lane.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kSimtWarps * 32) attn_simt_kernel(const AttnArgs a) {
  dev::pdl_begin();
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = a.D;
  float* sQ = reinterpret_cast<float*>(smem);  // [8][D]
  float* sK = sQ + kSimtWarps * D;               // [32][D + 1]
  float* sV = sK + kSimtKeys * (D + 1);          // [32][D]

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int G = a.group;
  const int R = G * a.Lq;
  const int RB = (R + kSimtWarps - 1) / kSimtWarps;
  int64_t bid = blockIdx.x;
  const int rb = static_cast<int>(bid % RB);
  bid /= RB;
  const int kvh = static_cast<int>(bid % a.Hkv);
  const int b = static_cast<int>(bid / a.Hkv);
  const int kvlen = attn_kv_len(a, b);
  const int64_t qoff = static_cast<int64_t>(kvlen) - a.Lq;

  const int r0 = rb * kSimtWarps;
  const int r_last = min(r0 + kSimtWarps, R) - 1;
  const int r = r0 + warp;
  const bool row_ok = r < R;
  const int i = row_ok ? r / G : 0;
  const int h = kvh * G + (row_ok ? r % G : 0);
  const int2 range = attn_key_range(a, i + qoff, kvlen);

  const T* qrow = static_cast<const T*>(a.q) + b * a.q_batch_stride + i * a.q_row_stride + static_cast<int64_t>(h) * D;
  const T* kg = static_cast<const T*>(a.k) + b * a.k_batch_stride + static_cast<int64_t>(kvh) * D;
  const T* vg = static_cast<const T*>(a.v) + b * a.v_batch_stride + static_cast<int64_t>(kvh) * D;
  if (row_ok)
    for (int d = lane; d < D; d += 32) sQ[warp * D + d] = to_f32(qrow[d]);

  const int n_lo = attn_key_range(a, r0 / G + qoff, kvlen).x;
  const int n_hi = attn_key_range(a, r_last / G + qoff, kvlen).y;
  const bool general = a.softcap > 0.0f || a.bias != nullptr || a.key_mask != nullptr;

  float o[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int n0 = n_lo; n0 < n_hi; n0 += kSimtKeys) {
    __syncthreads();  // previous tile fully consumed (and sQ written, first time)
    for (int idx = tid; idx < kSimtKeys * D; idx += kSimtWarps * 32) {
      const int kr = idx / D, d = idx % D;
      const int key = n0 + kr;
      const bool ok = key < n_hi;
      sK[kr * (D + 1) + d] = ok ? to_f32(kg[key * a.k_row_stride + d]) : 0.0f;
      sV[kr * D + d] = ok ? to_f32(vg[key * a.v_row_stride + d]) : 0.0f;
    }
    __syncthreads();
    if (!row_ok) continue;

    const int key = n0 + lane;
    float x = -INFINITY;
    if (key >= range.x && key < range.y) {
      float dot = 0.0f;
      const float* kr = sK + lane * (D + 1);
      const float* qr = sQ + warp * D;
      for (int d = 0; d < D; ++d) dot = fmaf(qr[d], kr[d], dot);
      if (!general) {
        x = dot * a.scale_log2;
      } else if (attn_key_kept(a, b, key, kvlen)) {
        x = attn_logit<T>(a, dot, b, h, i, key);
      }
    }
    const float m_new = fmaxf(m, warp_max(x));
    const float base = attn_row_base(m_new);
    const float alpha = exp2f(m - base);
    const float p = exp2f(x - base);
    l = l * alpha + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[c] *= alpha;
    for (int j = 0; j < kSimtKeys; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = lane + 32 * c;
        if (d < D) o[c] = fmaf(pj, sV[j * D + d], o[c]);
      }
    }
  }

  if (!row_ok) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* orow = static_cast<T*>(a.out) + ((static_cast<int64_t>(b) * a.Lq + i) * a.H + h) * D;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = lane + 32 * c;
    if (d < D) orow[d] = from_f32<T>(o[c] * inv);
  }
}

template <typename T, int kChunks>
void launch_simt_t(const AttnArgs& a, cudaStream_t stream) {
  auto kernel = attn_simt_kernel<T, kChunks>;
  const size_t smem = simt_smem_bytes(a.D);
  RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t RB = (static_cast<int64_t>(a.group) * a.Lq + kSimtWarps - 1) / kSimtWarps;
  const int64_t blocks = static_cast<int64_t>(a.B) * a.Hkv * RB;
  RLX_CHECK(blocks <= 0x7fffffff, "attention: grid too large (", blocks, " blocks)");
  kernel<<<static_cast<unsigned>(blocks), kSimtWarps * 32, smem, stream>>>(a);
  RLX_CUDA_CHECK_LAUNCH("attention (simt)");
}

template <typename T>
void launch_simt_dtype(const AttnArgs& a, cudaStream_t stream) {
  if (a.D <= 32) {
    launch_simt_t<T, 1>(a, stream);
  } else if (a.D <= 64) {
    launch_simt_t<T, 2>(a, stream);
  } else if (a.D <= 128) {
    launch_simt_t<T, 4>(a, stream);
  } else {
    launch_simt_t<T, 8>(a, stream);
  }
}

size_t smem_optin() {
  int device = 0, v = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(v);
}

void validate(const AttentionParams& p) {
  RLX_CHECK_AS(Unsupported, p.dtype == DType::F32 || p.dtype == DType::F16 || p.dtype == DType::BF16,
               "attention: cuda kernel has no ", dtype_name(p.dtype), " variant");
  RLX_CHECK(p.B >= 0 && p.Lq >= 0 && p.Lk >= 0, "attention: negative size (B=", p.B, ", Lq=", p.Lq, ", Lk=", p.Lk, ")");
  RLX_CHECK(p.H >= 1 && p.Hkv >= 1 && p.H % p.Hkv == 0, "attention: num_heads ", p.H,
            " is not a multiple of num_kv_heads ", p.Hkv);
  RLX_CHECK_AS(Unsupported, p.D >= 1 && p.D <= 256, "attention: head_dim ", p.D, " not in [1, 256]");
  RLX_CHECK(p.window <= 0 || p.causal, "attention: a sliding window requires causal masking");
  RLX_CHECK(p.bias == nullptr || p.bias_dtype == DType::F32 || p.bias_dtype == p.dtype, "attention: bias dtype ",
            dtype_name(p.bias_dtype), " must be f32 or ", dtype_name(p.dtype));
  RLX_CHECK(p.softcap >= 0.0f, "attention: negative softcap ", p.softcap);
  if (p.B > 0 && p.Lq > 0) {
    RLX_CHECK(p.q != nullptr && p.out != nullptr, "attention: null q or out pointer");
    RLX_CHECK(p.Lk == 0 || (p.k != nullptr && p.v != nullptr), "attention: null k or v pointer");
  }
}

dev::AttnArgs make_args(const AttentionParams& p) {
  dev::AttnArgs a{};
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.out = p.out;
  a.q_row_stride = p.q_row_stride;
  a.k_row_stride = p.k_row_stride;
  a.v_row_stride = p.v_row_stride;
  a.q_batch_stride = p.q_batch_stride;
  a.k_batch_stride = p.k_batch_stride;
  a.v_batch_stride = p.v_batch_stride;
  a.B = p.B;
  a.Lq = p.Lq;
  a.Lk = p.Lk;
  a.H = p.H;
  a.Hkv = p.Hkv;
  a.D = p.D;
  a.group = p.H / p.Hkv;
  a.scale = p.scale;
  a.scale_log2 = p.scale * dev::kLog2e;
  a.softcap = p.softcap;
  a.softcap_log2 = p.softcap * dev::kLog2e;
  a.causal = p.causal ? 1 : 0;
  a.window = p.causal ? p.window : 0;
  a.key_mask = p.key_mask;
  a.key_mask_b_stride = p.key_mask_b_stride;
  a.bias = p.bias;
  a.bias_f32 = p.bias_dtype == DType::F32 ? 1 : 0;
  a.bias_b_stride = p.bias_b_stride;
  a.bias_h_stride = p.bias_h_stride;
  a.bias_q_stride = p.bias_q_stride;
  a.kv_len = p.kv_len;
  a.kv_len_b_stride = p.kv_len_shared ? 0 : 1;
  a.kv_len_ready = p.kv_len_ready || p.kv_len == nullptr;
  a.kv_stable = a.kv_len_ready ? p.kv_stable : nullptr;
  a.out_f32 = p.out_f32;
  a.splits = 1;
  return a;
}

// Per row b of a key mask: not_prefix[b] = 1 when the kept keys are not
// exactly a prefix [0, n), else 0; lens[b] = n for a prefix, else one past the
// last kept key (the keys the kernel must look at).
__global__ void __launch_bounds__(256) key_mask_lengths_kernel(const uint8_t* mask, int64_t b_stride, int Lk,
                                                               int32_t* lens, int32_t* not_prefix) {
  dev::pdl_begin();
  __shared__ int first_zero, last_kept;
  if (threadIdx.x == 0) first_zero = Lk, last_kept = -1;
  __syncthreads();
  const uint8_t* row = mask + blockIdx.x * b_stride;
  int count = 0, fz = Lk, lk = -1;
  for (int j = threadIdx.x; j < Lk; j += blockDim.x) {
    if (row[j]) {
      ++count;
      lk = j;
    } else if (fz == Lk) {
      fz = j;
    }
  }
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  if (fz < Lk) atomicMin(&first_zero, fz);
  if (lk >= 0) atomicMax(&last_kept, lk);
  if (count) atomicAdd(&total, count);
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool prefix = last_kept < first_zero;
    lens[blockIdx.x] = prefix ? total : last_kept + 1;
    not_prefix[blockIdx.x] = prefix ? 0 : 1;
  }
}

// Tensor-core kernels copy 16-byte chunks: every row start must be aligned.
bool rows_16b_aligned(const AttentionParams& p) {
  auto al = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  auto st = [](int64_t s) { return s % 8 == 0; };
  return al(p.q) && al(p.k) && al(p.v) && al(p.out) && st(p.q_row_stride) && st(p.k_row_stride) &&
         st(p.v_row_stride) && st(p.q_batch_stride) && st(p.k_batch_stride) && st(p.v_batch_stride);
}

constexpr size_t kWsAlign = 256;
size_t align_up(size_t n) { return (n + kWsAlign - 1) / kWsAlign * kWsAlign; }

struct Plan {
  AttentionPath path = AttentionPath::Simt;
  int splits = 1;
  size_t ws_o_bytes = 0;   // partial outputs
  size_t ws_ml_bytes = 0;  // (m, l) pairs
  size_t ws_bytes = 0;     // total, with the row groups' arrival counters
  size_t counters = 0;     // arrival counters (one per row group) when splits > 1
};

Plan make_plan(const AttentionParams& p, const dev::AttnArgs& a) {
  Plan plan;
  plan.path = attention_path(p);
  if (plan.path == AttentionPath::Decode && p.B > 0 && p.Lq > 0) {
    plan.splits = detail::attention_decode_splits(p.dtype, a);
    if (plan.splits > 1) {
      const size_t rows = static_cast<size_t>(p.B) * p.Lq * p.H;
      plan.ws_o_bytes = align_up(rows * plan.splits * p.D * sizeof(float));
      plan.ws_ml_bytes = align_up(rows * plan.splits * 2 * sizeof(float));
      plan.counters = static_cast<size_t>(p.B) * p.Hkv * ((p.H / p.Hkv * p.Lq + 15) / 16);
      plan.ws_bytes = plan.ws_o_bytes + plan.ws_ml_bytes + align_up(plan.counters * sizeof(int));
    }
  }
  return plan;
}

}  // namespace

AttentionPath attention_path(const AttentionParams& p) {
  if (p.dtype == DType::F32 || !rows_16b_aligned(p)) return AttentionPath::Simt;
  const size_t optin = smem_optin();
  if (p.Lq <= 8) {
    if (detail::attention_decode_supported(p.dtype, p.D, optin)) return AttentionPath::Decode;
  } else if (detail::attention_prefill_supported(p.dtype, p.D, optin)) {
    return AttentionPath::Prefill;
  }
  return AttentionPath::Simt;
}

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::Simt: return "simt";
    case AttentionPath::Prefill: return "prefill_mma";
    case AttentionPath::Decode: return "decode_split_kv";
  }
  return "?";
}

// Not under causal masks: lengths would move the query positions.
bool attention_uses_mask_lengths(const AttentionParams& p) {
  return attention_path(p) == AttentionPath::Prefill && p.kv_len == nullptr && !p.causal && p.softcap == 0.0f &&
         p.bias == nullptr;
}

size_t attention_workspace_bytes(const AttentionParams& p) {
  validate(p);
  return make_plan(p, make_args(p)).ws_bytes;
}

size_t attention_counter_ints(const AttentionParams& p) {
  validate(p);
  return make_plan(p, make_args(p)).counters;
}

void launch_attention(const AttentionParams& p, void* workspace, cudaStream_t stream) {
  validate(p);
  if (p.B == 0 || p.Lq == 0) return;
  dev::AttnArgs a = make_args(p);
  const Plan plan = make_plan(p, a);
  RLX_CHECK_AS(Unsupported, !p.out_f32 || (plan.path == AttentionPath::Decode && p.dtype != DType::F32),
               "attention: an f32 output of ", dtype_name(p.dtype), " attention is only on the decode path (this is ",
               attention_path_name(plan.path), ")");
  switch (plan.path) {
    case AttentionPath::Decode:
      a.splits = plan.splits;
      if (plan.splits > 1) {
        RLX_CHECK(workspace != nullptr, "attention: decode needs ", plan.ws_bytes,
                  " bytes of workspace (attention_workspace_bytes) but got none");
        a.ws_o = static_cast<float*>(workspace);
        a.ws_ml = reinterpret_cast<float*>(static_cast<char*>(workspace) + plan.ws_o_bytes);
        // Counters that are already zero need no memset (attention_decode.cu).
        a.counters_zeroed = p.counters != nullptr;
        a.ws_count = p.counters ? p.counters
                                : reinterpret_cast<int*>(static_cast<char*>(workspace) + plan.ws_o_bytes + plan.ws_ml_bytes);
      }
      detail::launch_attention_decode(p.dtype, a, stream);
      return;
    case AttentionPath::Prefill:
      if (a.key_mask != nullptr && p.key_mask_scratch != nullptr && attention_uses_mask_lengths(p)) {
        int32_t* lens = p.key_mask_scratch;
        int32_t* flag = lens + p.B;  // per batch: 1 when its mask is not a prefix
        if (!p.key_mask_lengths_ready) {
          key_mask_lengths_kernel<<<static_cast<unsigned>(p.B), 256, 0, stream>>>(a.key_mask, a.key_mask_b_stride,
                                                                                  p.Lk, lens, flag);
          RLX_CUDA_CHECK_LAUNCH("attention (key mask lengths)");
        }
        // The mask-free kernel: lengths for every row, the mask per score in the flagged ones.
        a.kv_len = lens;
        a.kv_len_b_stride = 1;
        a.key_mask_rows = flag;
      }
      detail::launch_attention_prefill(p.dtype, a, stream);
      return;
    case AttentionPath::Simt:
      RLX_CHECK_AS(Unsupported, simt_smem_bytes(p.D) <= smem_optin(), "attention: head_dim ", p.D,
                   " needs more shared memory than this device has");
      if (p.dtype == DType::F32) {
        launch_simt_dtype<float>(a, stream);
      } else if (p.dtype == DType::F16) {
        launch_simt_dtype<__half>(a, stream);
      } else {
        launch_simt_dtype<__nv_bfloat16>(a, stream);
      }
      return;
  }
}

}  // namespace rlx::cuda
