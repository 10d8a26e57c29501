// Attention, Rope and the fused GLUs on the CPU.
//
// Attention. Keys j < kv (kv = the kv_len input when present, else Lk) are
// valid. For query i at absolute position q_pos = i + kv − Lq (bottom-right
// aligned) and each valid key j:
//   s_j = (q·k_j)·scale                      scale = attrs.effective_scale()
//   s_j = softcap·tanh(s_j / softcap)        if softcap > 0
//   s_j += bias[b|0, h|0, i, j]              MaskKind::Bias
// then hidden keys are dropped: Causal keeps j ≤ q_pos; SlidingWindow also
// needs q_pos − j < window; Custom drops keys whose [B, Lk] entry is zero.
// o = Σ_j softmax(s)_j · v_j, max subtracted, all in f32 (exact softmax: the
// scores of a row are all formed before the weighted sum).
// A row with no visible key (or only −inf scores) outputs zeros, not NaN.
// Two schedules, same arithmetic:
//  - row path (Lq ≤ 3, decode): one task per (b, kv head, i) serving the
//    query heads of that GQA group, so K/V stream once; dot products over
//    the visible key range only, weighted V sum skipping zero weights.
//  - block path (prefill): one task per (b, h, block of ≤ 128 queries) over
//    the block's key range; S = Q·Kᵀ and O = P·V run on the GEMM micro-kernel.
//    A Custom key mask narrows that range to its first..last kept key, so
//    right-padded keys cost nothing.
//    Hidden keys get weight exactly 0 (a non-finite V row under a hidden key
//    would still poison 0·v, as in any matmul-based attention).
// Memory: per chunk of tasks one qb×Lk score block (or an Lk row), a qb×D
// output block and the GEMM packing buffers; nothing per element.
//
// Rope. Head h reads x[b, l, src_offset + h·head_dim + d]; for i < n_rot/2,
// θ_i = pos·freq_scale·freq_base^(−2i/n_rot) / freq_factors[i] (rope_inv_freq), angles and rotation in f64.
// NeoX pairs (i, i + n_rot/2); Interleaved pairs (2i, 2i+1); dims ≥ n_rot copy.
// head_norm: each head is first x·rsqrt(Σx²/head_dim + eps)·w in f32 (Σ in
// f64), rotated without rounding in between. WriteSlice with rope stores
// the same rows (f32, then the state's type) into a KV cache at the offset.
//
// FusedSwiGLU / FusedGeGLU: y = act(x[..., :N]) · x[..., N:] (gate first).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/backends/cpu/kernels/vmath.h"
#include "rlx/core/half.h"

namespace rlx::cpu {
namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
constexpr int64_t kRowPathMaxLq = 3;    // decode-sized queries take the row path
// Query rows per block-path task: up to a whole sequence of this length, so
// the K and V blocks are packed once per head.
constexpr int64_t kMaxQueryBlock = 128;
constexpr int64_t kMaxGroup = 64;       // query heads per kv head on the row path

struct AttnProblem {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  int64_t B, Lq, Lk, H, Hkv, D;
  float scale, softcap;
  MaskKind mask;
  int64_t window;
  const uint8_t* keep;  // [B, Lk] (Custom) or null
  const float* bias;    // [B|1, H|1, Lq, Lk] (Bias) or null
  int64_t bias_sb, bias_sh;  // batch and head strides of bias (0 = broadcast)
  const int32_t* kv_len;     // valid keys, [1] or [B] (kv_len_n entries), or null = Lk
  int64_t kv_len_n;
  // Custom mask: per batch, the first kept key and one past the last; keys
  // outside never get weight, so no score is formed for them (padding).
  const int64_t* kept_lo;
  const int64_t* kept_hi;
};

inline int64_t valid_keys(const AttnProblem& p, int64_t b) {
  return p.kv_len ? p.kv_len[p.kv_len_n == 1 ? 0 : b] : p.Lk;
}

// Keys query row i of batch b may see by position: [lo, hi).
inline void visible_range(const AttnProblem& p, int64_t b, int64_t i, int64_t& lo, int64_t& hi) {
  const int64_t kv = valid_keys(p, b);
  lo = 0;
  hi = kv;
  if (p.mask == MaskKind::Causal || p.mask == MaskKind::SlidingWindow) {
    const int64_t q_pos = i + kv - p.Lq;
    hi = std::clamp<int64_t>(q_pos + 1, 0, kv);
    if (p.mask == MaskKind::SlidingWindow) lo = std::clamp<int64_t>(q_pos - p.window + 1, 0, kv);
  }
  if (p.kept_lo) {
    lo = std::max(lo, p.kept_lo[b]);
    hi = std::max(lo, std::min(hi, p.kept_hi[b]));
  }
}

// s[j − lo] for j in [lo, hi): raw q·k in (read only where visible), softmax
// numerators exp(s_j − max) out, 0 for hidden keys. Returns their sum; 0 when
// row i of head h sees nothing (the caller then writes zeros). Each step is
// its own loop over the row so it vectorizes; max and sum use 16 lanes.
RLX_CPU_MULTIVERSION
float softmax_numerators(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t lo, int64_t hi, float* s) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t n = hi - lo;
  int64_t vlo, vhi;
  visible_range(p, b, i, vlo, vhi);
  vlo = std::clamp(vlo - lo, int64_t{0}, n);
  vhi = std::clamp(vhi - lo, vlo, n);
  const uint8_t* keep = p.keep ? p.keep + b * p.Lk + lo : nullptr;
  const float* bias = p.bias ? p.bias + b * p.bias_sb + h * p.bias_sh + i * p.Lk + lo : nullptr;
  for (int64_t j = 0; j < n; ++j) s[j] *= p.scale;
  if (p.softcap > 0.0f)
    for (int64_t j = 0; j < n; ++j) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
  if (bias)
    for (int64_t j = 0; j < n; ++j) s[j] += bias[j];
  std::fill(s, s + vlo, neg_inf);
  std::fill(s + vhi, s + n, neg_inf);
  if (keep)
    for (int64_t j = vlo; j < vhi; ++j) s[j] = keep[j] ? s[j] : neg_inf;
  // The last n mod 16 scores go through a 16-lane block padded with −inf, so
  // the whole row runs vectorized (a row of a short text is mostly tail).
  constexpr int kLanes = 16;
  const int64_t whole = n / kLanes * kLanes, tail = n - whole;
  alignas(64) float pad[kLanes];
  std::fill_n(pad, kLanes, neg_inf);
  std::copy(s + whole, s + n, pad);
  float m[kLanes];
  std::copy_n(pad, kLanes, m);
  for (int64_t j = 0; j < whole; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
  float mx = neg_inf;
  for (float v : m) mx = v > mx ? v : mx;
  if (!(mx > neg_inf)) {
    std::fill_n(s, n, 0.0f);
    return 0.0f;
  }
  // exp_fast(−inf) is exactly 0, so hidden keys (and the padding) get weight 0.
  float acc[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) {
    pad[l] = exp_fast(pad[l] - mx);
    acc[l] += pad[l];
  }
  std::copy_n(pad, tail, s + whole);
  for (int64_t j = 0; j < whole; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      s[j + l] = exp_fast(s[j + l] - mx);
      acc[l] += s[j + l];
    }
  float sum = 0.0f;
  for (float v : acc) sum += v;
  return sum;
}

inline const float* q_row(const AttnProblem& p, int64_t b, int64_t i, int64_t h) {
  return p.q + ((b * p.Lq + i) * p.H + h) * p.D;
}
inline float* o_row(const AttnProblem& p, int64_t b, int64_t i, int64_t h) {
  return p.o + ((b * p.Lq + i) * p.H + h) * p.D;
}
inline const float* kv_row(const float* base, const AttnProblem& p, int64_t b, int64_t j, int64_t kh) {
  return base + ((b * p.Lk + j) * p.Hkv + kh) * p.D;
}

// Row path (decode, Lq ≤ 3): one task per (b, kv head, i) handles the G
// query heads sharing that kv head, so each K/V row is read once per task
// (K/V rows are strided by Hkv·D, so the next rows are prefetched). Dot
// products cover the visible key range only; the weighted V sum skips zero
// weights. s holds G rows of Lk scores, acc G rows of D.
RLX_CPU_MULTIVERSION
void attention_rows(const AttnProblem& p, int64_t t0, int64_t t1, float* s, float* acc) {
  const int64_t G = p.H / p.Hkv;
  constexpr int64_t kAhead = 4;  // rows prefetched ahead
  auto prefetch_row = [&](const float* row) {
    for (int64_t d = 0; d < p.D; d += 16) __builtin_prefetch(row + d);
  };
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b = t / (p.Hkv * p.Lq), kh = (t / p.Lq) % p.Hkv, i = t % p.Lq;
    const uint8_t* keep = p.keep ? p.keep + b * p.Lk : nullptr;
    int64_t lo, hi;
    visible_range(p, b, i, lo, hi);
    const int64_t nk = std::max<int64_t>(hi - lo, 0);
    for (int64_t j = lo; j < hi; ++j) {
      if (j + kAhead < hi) prefetch_row(kv_row(p.k, p, b, j + kAhead, kh));
      const float* kr = kv_row(p.k, p, b, j, kh);
      const bool hidden = keep && !keep[j];
      for (int64_t g = 0; g < G; ++g)
        s[g * p.Lk + j - lo] = hidden ? 0.0f : dot8(q_row(p, b, i, kh * G + g), kr, p.D);
    }
    float sums[kMaxGroup];
    for (int64_t g = 0; g < G; ++g)
      sums[g] = nk > 0 ? softmax_numerators(p, b, kh * G + g, i, lo, hi, s + g * p.Lk) : 0.0f;
    std::fill_n(acc, G * p.D, 0.0f);
    for (int64_t j = lo; j < hi; ++j) {
      if (j + kAhead < hi) prefetch_row(kv_row(p.v, p, b, j + kAhead, kh));
      const float* vr = kv_row(p.v, p, b, j, kh);
      for (int64_t g = 0; g < G; ++g) {
        const float w = s[g * p.Lk + j - lo];
        if (w != 0.0f) axpy(acc + g * p.D, w, vr, p.D);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float* orow = o_row(p, b, i, kh * G + g);
      const float inv = sums[g] > 0.0f ? 1.0f / sums[g] : 0.0f;
      for (int64_t d = 0; d < p.D; ++d) orow[d] = acc[g * p.D + d] * inv;
    }
  }
}

// Block path (prefill): task = (b, h, block of qb query rows) over the
// block's key range [lo, hi). S = Q_blk·K^T and O = P·V are two strided
// GEMMs (gemm_serial, no copies of Q/K/V beyond the kernel's packing); the
// softmax runs per row in between. Hidden keys get weight exactly 0.
void attention_block(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t i1, float* S, float* O,
                     GemmScratch& scratch) {
  const int64_t kh = h / (p.H / p.Hkv), qb = i1 - i0;
  int64_t lo, hi, unused;
  visible_range(p, b, i0, lo, unused);
  visible_range(p, b, i1 - 1, unused, hi);
  const int64_t nk = hi - lo;
  const int64_t row_stride = p.H * p.D, kv_stride = p.Hkv * p.D;
  if (nk <= 0) {
    for (int64_t i = i0; i < i1; ++i) std::fill_n(o_row(p, b, i, h), p.D, 0.0f);
    return;
  }
  // S[r][j − lo] = q_{i0+r} · k_j: A = Q rows (stride H·D), B(d, j) = K[j][d].
  gemm_serial(qb, nk, p.D, q_row(p, b, i0, h), row_stride, 1, kv_row(p.k, p, b, lo, kh), 1, kv_stride, S, nk,
              scratch);
  float sums[kMaxQueryBlock];
  for (int64_t r = 0; r < qb; ++r) sums[r] = softmax_numerators(p, b, h, i0 + r, lo, hi, S + r * nk);
  // O[r][d] = Σ_j P[r][j] · v_j[d].
  gemm_serial(qb, p.D, nk, S, nk, 1, kv_row(p.v, p, b, lo, kh), kv_stride, 1, O, p.D, scratch);
  for (int64_t r = 0; r < qb; ++r) {
    float* orow = o_row(p, b, i0 + r, h);
    const float inv = sums[r] > 0.0f ? 1.0f / sums[r] : 0.0f;
    for (int64_t d = 0; d < p.D; ++d) orow[d] = O[r * p.D + d] * inv;
  }
}

// Custom key mask of any supported dtype → bytes (1 = keep). Throws before
// the parallel loop for an unsupported dtype.
std::vector<uint8_t> key_mask(const KernelArgs& args, size_t input) {
  const int64_t n = args.in_numel(input);
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  const void* raw = args.in_raw(input);
  auto fill = [&](auto* src, auto nonzero) {
    for (int64_t t = 0; t < n; ++t) keep[static_cast<size_t>(t)] = nonzero(src[t]) ? 1 : 0;
  };
  auto ne0 = [](auto x) { return x != 0; };
  auto half_ne0 = [](uint16_t x) { return (x & 0x7fffu) != 0; };  // ±0 is zero
  switch (args.in_dtype(input)) {
    case DType::Bool: case DType::U8: fill(static_cast<const uint8_t*>(raw), ne0); break;
    case DType::I8: fill(static_cast<const int8_t*>(raw), ne0); break;
    case DType::I16: fill(static_cast<const int16_t*>(raw), ne0); break;
    case DType::I32: fill(static_cast<const int32_t*>(raw), ne0); break;
    case DType::I64: fill(static_cast<const int64_t*>(raw), ne0); break;
    case DType::F32: fill(static_cast<const float*>(raw), [](float x) { return x != 0.0f; }); break;
    case DType::F64: fill(static_cast<const double*>(raw), [](double x) { return x != 0.0; }); break;
    case DType::F16: case DType::BF16: fill(static_cast<const uint16_t*>(raw), half_ne0); break;
    default:
      throw Unsupported(str("cpu: ", args.where(), ": key mask dtype ", args.in_dtype(input),
                            " is not supported (use bool/u8/i8/i16/i32/i64/f16/bf16/f32/f64)"));
  }
  return keep;
}

void attention_kernel(KernelArgs& args) {
  const auto& a = args.attrs<AttentionAttrs>();
  const auto& qd = args.in_dims(0);
  const auto& kd = args.in_dims(1);
  AttnProblem p{};
  p.B = qd[0];
  p.Lq = qd[1];
  p.Lk = kd[1];
  p.H = a.num_heads;
  p.Hkv = a.num_kv_heads;
  p.D = a.head_dim;
  p.scale = a.effective_scale();
  p.softcap = a.softcap;
  p.mask = a.mask;
  p.window = a.window;
  std::vector<uint8_t> keep;
  std::vector<int64_t> kept_lo, kept_hi;
  if (a.mask == MaskKind::Custom) {
    keep = key_mask(args, 3);
    p.keep = keep.data();
    kept_lo.assign(static_cast<size_t>(p.B), 0);
    kept_hi.assign(static_cast<size_t>(p.B), 0);
    for (int64_t b = 0; b < p.B; ++b) {
      const uint8_t* row = p.keep + b * p.Lk;
      int64_t first = 0, last = p.Lk;
      while (first < p.Lk && !row[first]) ++first;
      while (last > first && !row[last - 1]) --last;
      kept_lo[static_cast<size_t>(b)] = first;
      kept_hi[static_cast<size_t>(b)] = last;
    }
    p.kept_lo = kept_lo.data();
    p.kept_hi = kept_hi.data();
  } else if (a.mask == MaskKind::Bias) {
    const auto& bd = args.in_dims(3);
    p.bias = args.in_f32(3);
    p.bias_sh = bd[1] == 1 ? 0 : p.Lq * p.Lk;
    p.bias_sb = bd[0] == 1 ? 0 : bd[1] * p.Lq * p.Lk;
  }
  if (a.kv_len_input) {
    const size_t li = args.num_inputs() - 1;
    p.kv_len = args.in<int32_t>(li);
    p.kv_len_n = args.in_numel(li);
    for (int64_t b = 0; b < p.kv_len_n; ++b)
      if (p.kv_len[b] < 0 || p.kv_len[b] > p.Lk)
        throw InvalidArgument(str(args.where(), ": kv_len ", p.kv_len[b], " is outside [0, ", p.Lk, "] keys"));
  }
  p.q = args.in_f32(0);
  if (p.kv_len) {
    // A KV cache: rows past a batch's valid length are never read, so only
    // each batch's prefix is converted (decode reads a few rows of 16-bit
    // caches sized for the whole context).
    std::vector<int64_t> used(static_cast<size_t>(p.B));
    for (int64_t b = 0; b < p.B; ++b) used[static_cast<size_t>(b)] = valid_keys(p, b);
    p.k = args.in_f32_rows(1, p.B, p.Lk, p.Hkv * p.D, used.data());
    p.v = args.in_f32_rows(2, p.B, p.Lk, p.Hkv * p.D, used.data());
  } else {
    p.k = args.in_f32(1);
    p.v = args.in_f32(2);
  }
  p.o = args.out_f32();
  const int64_t G = p.H / p.Hkv;
  if (p.Lq <= kRowPathMaxLq && G <= kMaxGroup) {
    const int64_t tasks = p.B * p.Hkv * p.Lq;
    const int64_t task_work = std::max<int64_t>(1, G * p.Lk * p.D);
    args.pool.parallel_for(tasks, std::max<int64_t>(1, 32768 / task_work), [&](int64_t t0, int64_t t1) {
      std::vector<float> s(static_cast<size_t>(G * p.Lk)), acc(static_cast<size_t>(G * p.D));
      attention_rows(p, t0, t1, s.data(), acc.data());
    });
    return;
  }
  // Query blocks: as large as kMaxQueryBlock while there are enough tasks.
  int64_t qb = kMaxQueryBlock;
  while (qb > 4 && p.B * p.H * ((p.Lq + qb - 1) / qb) < 4 * int64_t{args.pool.size()}) qb /= 2;
  const int64_t nqb = (p.Lq + qb - 1) / qb;
  args.pool.parallel_for(p.B * p.H * nqb, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> S(static_cast<size_t>(qb * p.Lk)), O(static_cast<size_t>(qb * p.D));
    GemmScratch scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (p.H * nqb), h = (t / nqb) % p.H, i0 = (t % nqb) * qb;
      attention_block(p, b, h, i0, std::min(p.Lq, i0 + qb), S.data(), O.data(), scratch);
    }
  });
}

// Rope of B·L rows of x (row stride W) into y [B·L, H·head_dim], f32.
void rope_rows(const RopeAttrs& a, const float* x, int64_t B, int64_t L, int64_t W, const int32_t* pos,
               bool batched_pos, const float* norm_w, float* y, ThreadPool& pool) {
  const int64_t H = a.num_heads, hd = a.head_dim, half = a.n_rot / 2;
  const int64_t OW = H * hd;
  const std::vector<double> inv_freq = rope_inv_freq(a);
  const double fscale = a.freq_scale;
  const bool neox = a.pairing == RopePairing::NeoX;
  pool.parallel_for(B * L, std::max<int64_t>(1, 8192 / std::max<int64_t>(OW, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<double> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    std::vector<float> normed(norm_w ? static_cast<size_t>(hd) : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / L, l = r % L;
      const double p = static_cast<double>(batched_pos ? pos[b * L + l] : pos[l]) * fscale;
      for (int64_t i = 0; i < half; ++i) {
        const double th = p * inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = std::cos(th);
        sn[static_cast<size_t>(i)] = std::sin(th);
      }
      const float* xr = x + r * W + a.src_offset;
      float* yr = y + r * OW;
      for (int64_t h = 0; h < H; ++h) {
        const float* xs = xr + h * hd;
        float* ys = yr + h * hd;
        if (norm_w) {
          double sq = 0.0;
          for (int64_t d = 0; d < hd; ++d) sq += static_cast<double>(xs[d]) * xs[d];
          const auto rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(hd) + a.norm_eps));
          for (int64_t d = 0; d < hd; ++d) normed[static_cast<size_t>(d)] = xs[d] * rstd * norm_w[d];
          xs = normed.data();
        }
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
          const double x0 = xs[i0], x1 = xs[i1];
          const double c = cs[static_cast<size_t>(i)], s = sn[static_cast<size_t>(i)];
          ys[i0] = static_cast<float>(x0 * c - x1 * s);
          ys[i1] = static_cast<float>(x1 * c + x0 * s);
        }
        for (int64_t d = a.n_rot; d < hd; ++d) ys[d] = xs[d];
      }
    }
  });
}

void rope_kernel(KernelArgs& args) {
  const auto& a = args.attrs<RopeAttrs>();
  const auto& xd = args.in_dims(0);
  rope_rows(a, args.in_f32(0), xd[0], xd[1], xd[2], args.in<int32_t>(1), args.in_dims(1).size() == 2,
            a.head_norm ? args.in_f32(2) : nullptr, args.out_f32(), args.pool);
}

// WriteSlice with rope: the rotated update rows (f32) stored at the offset,
// rounded once to the state's type. The state is written in place (never
// staged, it is the whole KV cache).
void rope_write_kernel(KernelArgs& args) {
  const RopeAttrs& a = args.attrs<WriteSliceAttrs>().rope_attrs;
  const auto& st = args.in_dims(0);
  const auto& ud = args.in_dims(1);
  const int64_t B = ud[0], L = ud[1], ctx = st[1], OW = st[2];
  RLX_CHECK(args.in_numel(2) >= 1, args.where(), ": the offset input is empty");
  const int64_t offset = args.in<int32_t>(2)[0];
  if (offset < 0 || offset + L > ctx)
    throw InvalidArgument(str(args.where(), ": offset ", offset, " + update length ", L,
                              " exceeds the state's dim 1 of ", ctx));
  const DType t = args.out_dtype();
  const int64_t es = dtype_size(t);
  auto* y = static_cast<char*>(args.out_raw());
  if (args.in_raw(0) != args.out_raw() && B * ctx * OW > 0)
    std::memcpy(y, args.in_raw(0), static_cast<size_t>(B * ctx * OW * es));
  std::vector<float> rows(static_cast<size_t>(B * L * OW));
  rope_rows(a, args.in_f32(1), B, L, ud[2], args.in<int32_t>(3), args.in_dims(3).size() == 2,
            a.head_norm ? args.in_f32(4) : nullptr, rows.data(), args.pool);
  for (int64_t r = 0; r < B * L; ++r) {
    const int64_t at = ((r / L) * ctx + offset + r % L) * OW;
    const float* src = rows.data() + r * OW;
    for (int64_t i = 0; i < OW; ++i) {
      if (t == DType::F16) reinterpret_cast<uint16_t*>(y)[at + i] = f32_to_f16(src[i]);
      else if (t == DType::BF16) reinterpret_cast<uint16_t*>(y)[at + i] = f32_to_bf16(src[i]);
      else reinterpret_cast<float*>(y)[at + i] = src[i];
    }
  }
}

enum class GluAct { Silu, GeluErf, GeluTanh };

// out = act(gate) · up over a row; compiled per ISA so the vmath loops vectorize.
RLX_CPU_MULTIVERSION
void glu_row(GluAct act, const float* gate, const float* up, float* out, int64_t n) {
  switch (act) {
    case GluAct::Silu:
      for (int64_t j = 0; j < n; ++j) out[j] = silu_fast(gate[j]) * up[j];
      break;
    case GluAct::GeluErf:
      for (int64_t j = 0; j < n; ++j) out[j] = gelu_erf(gate[j]) * up[j];
      break;
    case GluAct::GeluTanh:
      for (int64_t j = 0; j < n; ++j) out[j] = gelu_tanh_fast(gate[j]) * up[j];
      break;
  }
}

void glu_kernel(KernelArgs& args) {
  GluAct act = GluAct::Silu;
  if (args.node.op == OpKind::FusedGeGLU) {
    const auto* g = std::get_if<GluAttrs>(&args.node.attrs);
    act = g && g->tanh_approx ? GluAct::GeluTanh : GluAct::GeluErf;
  }
  const float* x = args.in_f32(0);
  float* y = args.out_f32();
  const int64_t n = args.out_dims().back();
  if (n == 0) return;
  const int64_t rows = args.out_numel() / n;
  args.pool.parallel_for(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) glu_row(act, x + r * 2 * n, x + r * 2 * n + n, y + r * n, n);
  });
}

}  // namespace

void register_attention_kernels() {
  for (DType t : kFloats) {
    const std::string sfx = str(" [", dtype_name(t), t == DType::F32 ? "" : " storage, f32 compute", "]");
    register_cpu_kernel(OpKind::Attention, {t, t, t, t}, attention_kernel,
                        "attention (exact softmax, GEMM blocks / decode rows)" + sfx);
    // Custom key mask (bool/int/float) or additive bias (any float type).
    register_cpu_kernel(OpKind::Attention, {t, t, t, kAnyDType, t}, attention_kernel,
                        "attention (exact softmax, GEMM blocks / decode rows; key mask, bias or kv_len)" + sfx);
    register_cpu_kernel(OpKind::Attention, {t, t, t, kAnyDType, DType::I32, t}, attention_kernel,
                        "attention (exact softmax, GEMM blocks / decode rows; mask and kv_len)" + sfx);
    register_cpu_kernel(OpKind::Rope, {t, DType::I32, t}, rope_kernel, "rope (f64 angles)" + sfx);
    for (DType w : kFloats)
      register_cpu_kernel(OpKind::Rope, {t, DType::I32, w, t}, rope_kernel,
                          str("rms_norm per head + rope (f64 angles, weight ", dtype_name(w), ")") + sfx);
  }
  // KV-cache writes of a rotated K: state type st, update type ut (any pair).
  for (DType st : kFloats)
    for (DType ut : kFloats) {
      const std::string sfx = str(" [", dtype_name(ut), " -> ", dtype_name(st), "]");
      register_cpu_kernel(OpKind::WriteSlice, {st, ut, DType::I32, DType::I32, st}, rope_write_kernel,
                          "write_slice of rope (f64 angles)" + sfx);
      for (DType w : kFloats)
        register_cpu_kernel(OpKind::WriteSlice, {st, ut, DType::I32, DType::I32, w, st}, rope_write_kernel,
                            str("write_slice of rms_norm per head + rope (weight ", dtype_name(w), ")") + sfx);
    }
  register_cpu_float_kernel(OpKind::FusedSwiGLU, {DType::F32, DType::F32}, glu_kernel, "swiglu (gate = first half)");
  register_cpu_float_kernel(OpKind::FusedGeGLU, {DType::F32, DType::F32}, glu_kernel, "geglu (gate = first half)");
}

}  // namespace rlx::cpu
