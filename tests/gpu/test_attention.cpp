// CUDA attention (rlx/backends/cuda/kernels/attention.h) against a
// double-precision CPU reference written here from the op's contract:
// every mask kind, GQA, softcap, custom scale, head dims 32/64/128/256 (and a
// non-tensor-core one), f16/bf16/f32, prefill and split-KV decode, odd sizes,
// fused-QKV strided input, per-batch kv_len. Inputs are random (fresh seed per
// run, printed on failure), outputs poisoned with NaN bytes before launch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "rlx/backends/cuda/kernels/attention.h"
#include "rlx/core/dtype.h"
#include "rlx/core/error.h"
#include "rlx/core/half.h"
#include "tests/test_util.h"

namespace {

using rlx::DType;
using rlx::cuda::AttentionParams;
using rlx::cuda::AttentionPath;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU()                          \
  do {                                              \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  explicit DevBuf(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

enum class Mask { None, Causal, Window, Custom, Bias };
const char* mask_str(Mask m) {
  switch (m) {
    case Mask::None: return "none";
    case Mask::Causal: return "causal";
    case Mask::Window: return "window";
    case Mask::Custom: return "custom";
    case Mask::Bias: return "bias";
  }
  return "?";
}

struct Case {
  DType dt = DType::F16;
  int B = 2, Lq = 33, Lk = 33, H = 8, Hkv = 2, D = 64;
  float scale = 0.0f;  // 0 → 1/√D
  float softcap = 0.0f;
  Mask mask = Mask::None;
  int64_t window = 16;
  bool fused = false;             // Q/K/V inside one [B, L, (H + 2Hkv)·D] buffer (Lq == Lk)
  int row_pad = 0;                // extra elements per Q/K/V row (separate buffers)
  std::vector<int> kv_len;        // per batch, empty = none
  int kv_stable = -1;             // ≥ 0: decode told rows below it may be read before pdl_wait
  int bias_bcast = 0;             // 0 [B,H,Lq,Lk], 1 [1,H,Lq,Lk], 2 [B,1,Lq,Lk], 3 [B,1,1,Lk]
  bool bias_storage = false;      // bias in the storage dtype instead of f32
  bool mask_batch0_all = false;   // custom mask hides every key of batch 0
  bool mask_prefix_even = false;  // custom mask: even batches keep a prefix of keys (right padding)
  bool mask_scratch = false;      // give the launch key_mask_scratch (prefix masks become lengths)
  int expect_path = -1;           // AttentionPath to assert, or -1

  std::string name() const {
    std::ostringstream os;
    os << rlx::dtype_name(dt) << " B" << B << " Lq" << Lq << " Lk" << Lk << " H" << H << "/" << Hkv << " D" << D
       << " mask=" << mask_str(mask);
    if (mask == Mask::Window) os << "(" << window << ")";
    if (scale != 0.0f) os << " scale=" << scale;
    if (softcap > 0.0f) os << " softcap=" << softcap;
    if (fused) os << " fused";
    if (row_pad) os << " pad=" << row_pad;
    if (!kv_len.empty()) os << " kv_len";
    if (kv_stable >= 0) os << " kv_stable=" << kv_stable;
    if (mask == Mask::Bias) os << " bias_bcast=" << bias_bcast << (bias_storage ? " storage" : " f32");
    if (mask_prefix_even) os << " prefix-masks";
    if (mask_scratch) os << " mask-scratch";
    return os.str();
  }
};

// Host copy of a device tensor in the storage dtype, plus the exact values.
struct HostData {
  std::vector<uint8_t> bytes;
  std::vector<double> val;
};

void fill(HostData& h, size_t n, DType dt, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const size_t es = static_cast<size_t>(rlx::dtype_size(dt));
  h.bytes.resize(n * es);
  h.val.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float f = dist(rng);
    if (f == 0.0f) f = 0.25f;  // never zeros
    if (dt == DType::F32) {
      std::memcpy(&h.bytes[i * 4], &f, 4);
      h.val[i] = f;
    } else {
      const uint16_t b = dt == DType::F16 ? rlx::f32_to_f16(f) : rlx::f32_to_bf16(f);
      std::memcpy(&h.bytes[i * 2], &b, 2);
      h.val[i] = dt == DType::F16 ? rlx::f16_to_f32(b) : rlx::bf16_to_f32(b);
    }
  }
}

double decode_elem(const uint8_t* p, DType dt) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return dt == DType::F16 ? rlx::f16_to_f32(b) : rlx::bf16_to_f32(b);
}

struct Tol {
  double atol, rtol;
};
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1.6e-2, 1.6e-2};
    default: return {1e-4, 1e-4};
  }
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.name() + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int B = c.B, Lq = c.Lq, Lk = c.Lk, H = c.H, Hkv = c.Hkv, D = c.D;
  const DType dt = c.dt;
  const size_t es = static_cast<size_t>(rlx::dtype_size(dt));
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(static_cast<double>(D));

  AttentionParams p;
  p.dtype = dt;
  p.B = B;
  p.Lq = Lq;
  p.Lk = Lk;
  p.H = H;
  p.Hkv = Hkv;
  p.D = D;
  p.scale = static_cast<float>(scale);
  p.softcap = c.softcap;
  p.causal = c.mask == Mask::Causal || c.mask == Mask::Window;
  p.window = c.mask == Mask::Window ? c.window : 0;

  // Q/K/V: element (b, l, head, d) of each lives at buf + off(b, l) + head·D + d.
  HostData qh, kh, vh;
  DevBuf qd, kd, vd;
  int64_t q_rs, k_rs, q_bs, k_bs;
  size_t q_base = 0, k_base = 0, v_base = 0;  // element offsets into the (shared) host arrays
  const HostData *qs, *ks, *vs;
  if (c.fused) {
    EXPECT_EQ(Lq, Lk) << "fused QKV needs Lq == Lk";
    const int64_t W = static_cast<int64_t>(H + 2 * Hkv) * D;
    fill(qh, static_cast<size_t>(B) * Lq * W, dt, rng, -1.0f, 1.0f);
    qd = DevBuf(qh.bytes.size());
    ASSERT_NE(qd.p, nullptr);
    CUDA_OK(cudaMemcpy(qd.p, qh.bytes.data(), qh.bytes.size(), cudaMemcpyHostToDevice));
    q_rs = k_rs = W;
    q_bs = k_bs = W * Lq;
    k_base = static_cast<size_t>(H) * D;
    v_base = static_cast<size_t>(H + Hkv) * D;
    qs = ks = vs = &qh;
    p.q = qd.p;
    p.k = static_cast<char*>(qd.p) + k_base * es;
    p.v = static_cast<char*>(qd.p) + v_base * es;
  } else {
    q_rs = static_cast<int64_t>(H) * D + c.row_pad;
    k_rs = static_cast<int64_t>(Hkv) * D + c.row_pad;
    q_bs = q_rs * Lq;
    k_bs = k_rs * Lk;
    fill(qh, static_cast<size_t>(B) * q_bs, dt, rng, -1.0f, 1.0f);
    fill(kh, static_cast<size_t>(B) * k_bs, dt, rng, -1.0f, 1.0f);
    fill(vh, static_cast<size_t>(B) * k_bs, dt, rng, -1.0f, 1.0f);
    qd = DevBuf(qh.bytes.size());
    kd = DevBuf(kh.bytes.size());
    vd = DevBuf(vh.bytes.size());
    ASSERT_TRUE(qd.p && (Lk == 0 || (kd.p && vd.p)));
    CUDA_OK(cudaMemcpy(qd.p, qh.bytes.data(), qh.bytes.size(), cudaMemcpyHostToDevice));
    if (Lk > 0) {
      CUDA_OK(cudaMemcpy(kd.p, kh.bytes.data(), kh.bytes.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(vd.p, vh.bytes.data(), vh.bytes.size(), cudaMemcpyHostToDevice));
    }
    qs = &qh;
    ks = &kh;
    vs = &vh;
    p.q = qd.p;
    p.k = kd.p;
    p.v = vd.p;
  }
  p.q_row_stride = q_rs;
  p.k_row_stride = p.v_row_stride = k_rs;
  p.q_batch_stride = q_bs;
  p.k_batch_stride = p.v_batch_stride = k_bs;

  // Custom key mask [B, Lk].
  std::vector<uint8_t> km;
  DevBuf kmd;
  if (c.mask == Mask::Custom) {
    km.resize(static_cast<size_t>(B) * Lk);
    std::bernoulli_distribution keep(0.7);
    for (int b = 0; b < B; ++b) {
      const int prefix = (b * 37 + 5) % (Lk + 1);
      for (int j = 0; j < Lk; ++j) {
        uint8_t v = keep(rng) ? 1 + j % 3 : 0;
        if (c.mask_prefix_even && b % 2 == 0) v = j < prefix ? 1 : 0;
        km[static_cast<size_t>(b) * Lk + j] = (c.mask_batch0_all && b == 0) ? 0 : v;
      }
    }
    kmd = DevBuf(std::max<size_t>(km.size(), 1));
    CUDA_OK(cudaMemcpy(kmd.p, km.data(), km.size(), cudaMemcpyHostToDevice));
    p.key_mask = static_cast<const uint8_t*>(kmd.p);
    p.key_mask_b_stride = Lk;
  }
  DevBuf scratch;
  if (c.mask_scratch) {
    scratch = DevBuf(rlx::cuda::key_mask_scratch_ints(B) * sizeof(int32_t));
    ASSERT_NE(scratch.p, nullptr);
    p.key_mask_scratch = static_cast<int32_t*>(scratch.p);
  }

  // Additive bias with broadcast strides.
  HostData bh;
  DevBuf bd;
  int64_t bb = 0, bhs = 0, bq = 0;
  if (c.mask == Mask::Bias) {
    const int nb = (c.bias_bcast == 1) ? 1 : B;
    const int nh = (c.bias_bcast == 2 || c.bias_bcast == 3) ? 1 : H;
    const int nq = (c.bias_bcast == 3) ? 1 : Lq;
    bq = nq == 1 ? 0 : Lk;
    bhs = nh == 1 ? 0 : static_cast<int64_t>(nq) * Lk;
    bb = nb == 1 ? 0 : static_cast<int64_t>(nh) * nq * Lk;
    const DType bdt = c.bias_storage ? dt : DType::F32;
    fill(bh, static_cast<size_t>(nb) * nh * nq * Lk, bdt, rng, -2.0f, 2.0f);
    bd = DevBuf(std::max<size_t>(bh.bytes.size(), 1));
    CUDA_OK(cudaMemcpy(bd.p, bh.bytes.data(), bh.bytes.size(), cudaMemcpyHostToDevice));
    p.bias = bd.p;
    p.bias_dtype = bdt;
    p.bias_b_stride = bb;
    p.bias_h_stride = bhs;
    p.bias_q_stride = bq;
  }

  DevBuf kvd;
  if (!c.kv_len.empty()) {
    EXPECT_EQ(static_cast<int>(c.kv_len.size()), B);
    kvd = DevBuf(c.kv_len.size() * sizeof(int32_t));
    std::vector<int32_t> kv(c.kv_len.begin(), c.kv_len.end());
    CUDA_OK(cudaMemcpy(kvd.p, kv.data(), kv.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    p.kv_len = static_cast<const int32_t*>(kvd.p);
  }
  // The early-read split of each CTA's first tiles (rows below the cut before
  // pdl_wait, the rest after) must load exactly what one load does.
  DevBuf stable_d;
  if (c.kv_stable >= 0) {
    stable_d = DevBuf(sizeof(int32_t));
    const int32_t v = c.kv_stable;
    CUDA_OK(cudaMemcpy(stable_d.p, &v, sizeof v, cudaMemcpyHostToDevice));
    p.kv_len_ready = true;
    p.kv_stable = static_cast<const int32_t*>(stable_d.p);
  }

  const size_t out_elems = static_cast<size_t>(B) * Lq * H * D;
  DevBuf od(out_elems * es);
  ASSERT_NE(od.p, nullptr);
  CUDA_OK(cudaMemset(od.p, 0xFF, out_elems * es));  // NaN poison
  p.out = od.p;

  if (c.expect_path >= 0) {
    EXPECT_EQ(static_cast<int>(rlx::cuda::attention_path(p)), c.expect_path)
        << "path " << rlx::cuda::attention_path_name(rlx::cuda::attention_path(p));
  }
  const size_t ws_bytes = rlx::cuda::attention_workspace_bytes(p);
  DevBuf ws(ws_bytes);
  if (ws_bytes) {
    CUDA_OK(cudaMemset(ws.p, 0xFF, ws_bytes));
  }
  rlx::cuda::launch_attention(p, ws.p, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());

  std::vector<uint8_t> ob(out_elems * es);
  CUDA_OK(cudaMemcpy(ob.data(), od.p, ob.size(), cudaMemcpyDeviceToHost));

  // Reference.
  const Tol tol = tol_for(dt);
  const int G = H / Hkv;
  int bad = 0;
  double max_err = 0.0;
  std::vector<double> sc(static_cast<size_t>(std::max(Lk, 1)));
  std::vector<char> vis(static_cast<size_t>(std::max(Lk, 1)));
  std::vector<double> ref(static_cast<size_t>(D));
  for (int b = 0; b < B; ++b) {
    const int kvlen = c.kv_len.empty() ? Lk : std::clamp(c.kv_len[static_cast<size_t>(b)], 0, Lk);
    for (int i = 0; i < Lq; ++i) {
      const int64_t qpos = static_cast<int64_t>(i) + kvlen - Lq;
      for (int h = 0; h < H; ++h) {
        const int g = h / G;
        const size_t qo = q_base + static_cast<size_t>(b * q_bs + i * q_rs) + static_cast<size_t>(h) * D;
        double mx = -INFINITY;
        for (int j = 0; j < Lk; ++j) {
          bool v = j < kvlen;
          if (p.causal) {
            v = v && j <= qpos;
            if (c.mask == Mask::Window) v = v && qpos - j < c.window;
          }
          if (c.mask == Mask::Custom) v = v && km[static_cast<size_t>(b) * Lk + j] != 0;
          vis[static_cast<size_t>(j)] = v;
          if (!v) continue;
          const size_t ko = k_base + static_cast<size_t>(b * k_bs + j * k_rs) + static_cast<size_t>(g) * D;
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += qs->val[qo + d] * ks->val[ko + d];
          double s = scale * dot;
          if (c.softcap > 0.0f) s = c.softcap * std::tanh(s / c.softcap);
          if (c.mask == Mask::Bias) s += bh.val[static_cast<size_t>(b * bb + h * bhs + i * bq + j)];
          sc[static_cast<size_t>(j)] = s;
          mx = std::max(mx, s);
        }
        std::fill(ref.begin(), ref.end(), 0.0);
        double sum = 0.0;
        for (int j = 0; j < Lk; ++j) {
          if (!vis[static_cast<size_t>(j)]) continue;
          const double w = std::exp(sc[static_cast<size_t>(j)] - mx);
          sum += w;
          const size_t vo = v_base + static_cast<size_t>(b * k_bs + j * k_rs) + static_cast<size_t>(g) * D;
          for (int d = 0; d < D; ++d) ref[static_cast<size_t>(d)] += w * vs->val[vo + d];
        }
        for (int d = 0; d < D; ++d) {
          const double r = sum > 0.0 ? ref[static_cast<size_t>(d)] / sum : 0.0;
          const size_t oi = ((static_cast<size_t>(b) * Lq + i) * H + h) * D + d;
          const double got = decode_elem(&ob[oi * es], dt);
          const double err = std::fabs(got - r);
          if (!(err <= tol.atol + tol.rtol * std::fabs(r))) {
            if (bad < 8)
              ADD_FAILURE() << "mismatch at b=" << b << " i=" << i << " h=" << h << " d=" << d << ": got " << got
                            << ", want " << r << " (path "
                            << rlx::cuda::attention_path_name(rlx::cuda::attention_path(p)) << ")";
            ++bad;
          }
          if (std::isfinite(err)) max_err = std::max(max_err, err);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << out_elems << " outputs out of tolerance; max finite error " << max_err;
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

constexpr int kSimt = static_cast<int>(AttentionPath::Simt);
constexpr int kPrefill = static_cast<int>(AttentionPath::Prefill);
constexpr int kDecode = static_cast<int>(AttentionPath::Decode);

const DType kAllTypes[] = {DType::F16, DType::BF16, DType::F32};
const Mask kAllMasks[] = {Mask::None, Mask::Causal, Mask::Window, Mask::Custom, Mask::Bias};

TEST(AttentionGpu, EveryMaskHeadDimDtypePrefill) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int D : {32, 64, 128, 256})
      for (Mask m : kAllMasks) {
        Case c;
        c.dt = dt;
        c.B = 2;
        c.Lq = c.Lk = 150;  // two m-tiles of 128, three k-tiles of 64, ragged ends
        c.H = 4;
        c.Hkv = 2;
        c.D = D;
        c.mask = m;
        c.window = 37;
        c.expect_path = dt == DType::F32 ? kSimt : kPrefill;
        run_case(c, fresh_seed());
      }
}

TEST(AttentionGpu, EveryMaskHeadDimDtypeDecode) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int D : {32, 64, 128, 256})
      for (Mask m : kAllMasks) {
        Case c;
        c.dt = dt;
        c.B = 2;
        c.Lq = 1;
        c.Lk = 4097;
        c.H = 8;
        c.Hkv = 2;
        c.D = D;
        c.mask = m;
        c.window = 1000;
        c.expect_path = dt == DType::F32 ? kSimt : kDecode;
        run_case(c, fresh_seed());
      }
}

TEST(AttentionGpu, GqaRatios) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (auto [H, Hkv] : {std::pair{8, 2}, std::pair{8, 8}, std::pair{8, 1}, std::pair{6, 3}})
      for (int Lq : {1, 4, 70})
        for (Mask m : {Mask::None, Mask::Causal}) {
          Case c;
          c.dt = dt;
          c.H = H;
          c.Hkv = Hkv;
          c.Lq = Lq;
          c.Lk = 300;
          c.D = 64;
          c.mask = m;
          run_case(c, fresh_seed());
        }
}

TEST(AttentionGpu, SoftcapAndCustomScale) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int D : {64, 128})
      for (int Lq : {1, 100})
        for (Mask m : {Mask::None, Mask::Causal, Mask::Bias}) {
          Case c;
          c.dt = dt;
          c.D = D;
          c.Lq = Lq;
          c.Lk = 257;
          c.scale = 0.5f;  // logits of several units, so the cap bites
          c.softcap = 5.0f;
          c.mask = m;
          run_case(c, fresh_seed());
          c.softcap = 0.0f;
          c.scale = 0.03125f;
          run_case(c, fresh_seed());
        }
}

TEST(AttentionGpu, OddSizes) {
  SKIP_WITHOUT_GPU();
  const std::pair<int, int> sizes[] = {{7, 33}, {33, 7}, {129, 129}, {1, 1}, {9, 200}, {200, 9}, {3, 65}, {8, 8}};
  for (DType dt : kAllTypes)
    for (auto [Lq, Lk] : sizes)
      for (Mask m : {Mask::None, Mask::Causal, Mask::Window, Mask::Custom}) {
        Case c;
        c.dt = dt;
        c.B = 3;
        c.H = 3;
        c.Hkv = 1;
        c.D = 64;
        c.Lq = Lq;
        c.Lk = Lk;
        c.mask = m;
        c.window = 5;
        run_case(c, fresh_seed());
      }
}

TEST(AttentionGpu, DecodeManyRowsPerKvHead) {
  SKIP_WITHOUT_GPU();
  // G·Lq = 64 rows per kv head → 4 row groups; causal decode with Lq > 1.
  for (DType dt : {DType::F16, DType::BF16})
    for (int Lq : {2, 5, 8})
      for (Mask m : {Mask::None, Mask::Causal, Mask::Window}) {
        Case c;
        c.dt = dt;
        c.B = 2;
        c.H = 32;
        c.Hkv = 4;
        c.D = 128;
        c.Lq = Lq;
        c.Lk = 2051;
        c.mask = m;
        c.window = 300;
        c.expect_path = kDecode;
        run_case(c, fresh_seed());
      }
}

TEST(AttentionGpu, FusedQkvStrided) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int D : {64, 128})
      for (int L : {5, 77, 200})
        for (Mask m : {Mask::None, Mask::Causal, Mask::Custom}) {
          Case c;
          c.dt = dt;
          c.fused = true;
          c.B = 2;
          c.H = 8;
          c.Hkv = 2;
          c.D = D;
          c.Lq = c.Lk = L;
          c.mask = m;
          run_case(c, fresh_seed());
        }
}

TEST(AttentionGpu, KvLenPrefillAndDecode) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (Mask m : {Mask::None, Mask::Causal, Mask::Window, Mask::Custom}) {
      Case c;
      c.dt = dt;
      c.B = 4;
      c.H = 4;
      c.Hkv = 2;
      c.D = 64;
      c.mask = m;
      c.window = 20;
      c.Lq = 40;
      c.Lk = 100;
      c.kv_len = {100, 57, 0, 40};
      run_case(c, fresh_seed());
      c.Lq = 1;
      c.Lk = 4097;
      c.kv_len = {4097, 1234, 1, 0};
      c.window = 700;
      run_case(c, fresh_seed());
      c.Lq = 3;
      c.kv_len = {2, 3000, 64, 4097};
      run_case(c, fresh_seed());
    }
}

// Decode told that K/V rows below a cut are stable (requested before
// pdl_wait, the rest after): cuts before, inside and past each CTA's first
// tiles, whole and partial tiles, 2 to 8 splits of one 64-key tile each
// (65 to 193 keys, and 1000 under a 512-key window).
TEST(AttentionGpu, DecodeStableRowsReadEarly) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int>> lengths = {{160, 1000}, {192, 193}, {65, 128}};
  for (DType dt : {DType::F16, DType::BF16})
    for (int D : {64, 256})
      for (const std::vector<int>& lens : lengths)
        for (int stable : {0, 1, 37, 64, 100, 159, 160, 192, 5000}) {
          Case c;
          c.dt = dt;
          c.B = 2;
          c.H = 4;
          c.Hkv = 1;
          c.D = D;
          c.Lq = 1;
          c.Lk = 1024;
          c.mask = Mask::Window;
          c.window = 512;
          c.kv_len = lens;
          c.kv_stable = stable;
          c.expect_path = kDecode;
          run_case(c, fresh_seed());
        }
}

// Head dim 256 (Gemma 3) decodes with 8 warps and 128-key tiles unless
// RLX_CUDA_DECODE_ATTN_WIDE=0 (4 warps, 64-key tiles): both, at key counts on
// either side of a tile, a split and the 8-warp tile's warps (one key, a
// warp's 16, 64, 128 in one pass, 129 and 1000 across splits), GQA groups of
// 4 and 8, with and without rows read before pdl_wait.
TEST(AttentionGpu, DecodeHeadDim256NarrowAndWideTiles) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int>> lengths = {{1, 16},    {17, 64},   {65, 127},  {128, 129},
                                                 {255, 257}, {383, 385}, {200, 1000}};
  // {RLX_CUDA_DECODE_ATTN_WIDE, RLX_CUDA_DECODE_ATTN_TILES}: one to three 128-key tiles per split.
  const std::vector<std::pair<const char*, const char*>> forms = {{"1", "1"}, {"1", "2"}, {"1", "3"}, {"0", "1"}};
  for (const auto& [wide, tiles] : forms) {
    rlx::test::ScopedEnv knob("RLX_CUDA_DECODE_ATTN_WIDE", wide);
    rlx::test::ScopedEnv knob_tiles("RLX_CUDA_DECODE_ATTN_TILES", tiles);
    for (DType dt : {DType::F16, DType::BF16})
      for (int group : {4, 8})
        for (const std::vector<int>& lens : lengths)
          for (Mask m : {Mask::None, Mask::Window}) {
            SCOPED_TRACE(std::string("RLX_CUDA_DECODE_ATTN_WIDE=") + wide + " TILES=" + tiles + " kv_len " +
                         std::to_string(lens[0]) + "," + std::to_string(lens[1]));
            Case c;
            c.dt = dt;
            c.B = 2;
            c.H = group;
            c.Hkv = 1;
            c.D = 256;
            c.Lq = 1;
            c.Lk = 1024;
            c.mask = m;
            c.window = 100;
            c.kv_len = lens;
            c.kv_stable = lens[0] > 64 ? lens[0] - 40 : -1;
            c.expect_path = kDecode;
            run_case(c, fresh_seed());
          }
  }
}

// Embedding-model shapes (every key in one or two tiles), many CTAs, fused
// QKV, and key masks given with key_mask_scratch: the mask-free kernel takes
// the right-padded rows as lengths and masks the others per score (up to
// their last kept key), a fully masked row included.
TEST(AttentionGpu, EmbeddingShapesAndPaddingKeyMasks) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F16, DType::BF16})
    for (int D : {32, 64}) {
      Case c;
      c.dt = dt;
      c.D = D;
      c.B = 48;
      c.H = c.Hkv = 12;
      c.fused = true;
      c.Lq = c.Lk = 128;  // MiniLM / BERT shape
      c.expect_path = kPrefill;
      run_case(c, fresh_seed());
      c.Lq = c.Lk = 77;
      c.mask = Mask::Causal;
      run_case(c, fresh_seed());
      c.fused = false;
      c.B = 24;
      c.Hkv = 4;
      c.Lq = 40;
      c.Lk = 128;
      c.mask = Mask::Window;
      c.window = 19;
      c.kv_len.clear();
      for (int b = 0; b < c.B; ++b) c.kv_len.push_back(b % 6 == 0 ? 0 : (b * 29) % 129);
      run_case(c, fresh_seed());
      c.mask = Mask::None;
      c.Lq = 130;
      run_case(c, fresh_seed());
      c.kv_len.clear();
      c.Lq = c.Lk = 128;
      c.Hkv = 12;
      c.fused = true;
      c.mask = Mask::Custom;
      c.mask_prefix_even = true;
      c.mask_scratch = true;
      run_case(c, fresh_seed());
      c.Lq = c.Lk = 77;  // partial key tiles
      c.mask_batch0_all = true;
      run_case(c, fresh_seed());
    }
  for (int D : {128, 256}) {  // several key tiles per row
    Case c;
    c.D = D;
    c.B = 6;
    c.H = c.Hkv = 2;
    c.Lq = 70;
    c.Lk = 200;
    c.mask = Mask::Custom;
    c.mask_prefix_even = true;
    c.mask_scratch = true;
    c.expect_path = kPrefill;
    run_case(c, fresh_seed());
  }
}

TEST(AttentionGpu, BiasBroadcastAndDtype) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int bc = 0; bc < 4; ++bc)
      for (bool storage : {false, true})
        for (int Lq : {1, 70}) {
          Case c;
          c.dt = dt;
          c.mask = Mask::Bias;
          c.bias_bcast = bc;
          c.bias_storage = storage;
          c.Lq = Lq;
          c.Lk = 150;
          run_case(c, fresh_seed());
        }
}

TEST(AttentionGpu, FullyMaskedRowsAreZero) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllTypes)
    for (int Lq : {1, 70}) {
      Case c;
      c.dt = dt;
      c.mask = Mask::Custom;
      c.mask_batch0_all = true;
      c.Lq = Lq;
      c.Lk = 90;
      run_case(c, fresh_seed());
      // Causal with Lq > Lk: the first Lq − Lk queries see nothing.
      Case d;
      d.dt = dt;
      d.mask = Mask::Causal;
      d.Lq = 100;
      d.Lk = 30;
      run_case(d, fresh_seed());
      // No keys at all.
      d.Lk = 0;
      d.mask = Mask::None;
      d.Lq = Lq;
      run_case(d, fresh_seed());
    }
}

TEST(AttentionGpu, SimtFallbacks) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F16, DType::BF16})
    for (int Lq : {1, 50}) {
      Case c;  // head dim without a tensor-core kernel
      c.dt = dt;
      c.D = 80;
      c.Lq = Lq;
      c.Lk = 99;
      c.mask = Mask::Causal;
      c.expect_path = kSimt;
      run_case(c, fresh_seed());
      Case u;  // rows not 16-byte aligned
      u.dt = dt;
      u.D = 64;
      u.row_pad = 3;
      u.Lq = Lq;
      u.Lk = 99;
      u.mask = Mask::Window;
      u.window = 10;
      u.expect_path = kSimt;
      run_case(u, fresh_seed());
    }
}

TEST(AttentionGpu, LongCausalAndWindowPrefill) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F16, DType::BF16})
    for (Mask m : {Mask::Causal, Mask::Window}) {
      Case c;
      c.dt = dt;
      c.B = 1;
      c.H = 2;
      c.Hkv = 1;
      c.D = 128;
      c.Lq = 1024;
      c.Lk = 1100;
      c.mask = m;
      c.window = 100;
      c.expect_path = kPrefill;
      run_case(c, fresh_seed());
    }
}

TEST(AttentionGpu, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  AttentionParams p;
  p.dtype = DType::F16;
  p.H = 6;
  p.Hkv = 4;  // not a divisor
  p.Lq = p.Lk = 4;
  p.set_dense_strides();
  EXPECT_THROW(rlx::cuda::launch_attention(p, nullptr, nullptr), rlx::InvalidArgument);
  p.H = 4;
  p.D = 512;
  EXPECT_THROW(rlx::cuda::launch_attention(p, nullptr, nullptr), rlx::Unsupported);
  p.D = 64;
  p.dtype = DType::I32;
  EXPECT_THROW(rlx::cuda::launch_attention(p, nullptr, nullptr), rlx::Unsupported);
  p.dtype = DType::F16;
  p.window = 8;  // without causal
  EXPECT_THROW(rlx::cuda::launch_attention(p, nullptr, nullptr), rlx::InvalidArgument);
}

}  // namespace
