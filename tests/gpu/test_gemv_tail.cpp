// Work done in the last CTA of an m = 1 quantized GEMV (GemvTail,
// gemv_tail.cuh) against the two launches it replaces, each of which the
// tiny-model and conformance tests check against the CPU:
//  - the decode rope + KV-cache writes against the GEMV, then
//    launch_rope_qkv_write: the GEMV's output, the rotated Q, both cache rows
//    and the error flag bit for bit, for the int8-activation and the
//    f32-activation unit kernels, f32 / f16 / bf16 activations, 16- and
//    32-bit caches, head norms or none, both pairings and a partial rotation;
//    a bad cache offset flags the error and writes no cache row;
//  - the post-norm (pair) against the GEMV, then launch_post_rms_norm: both
//    results bit for bit, at every register layout the tail takes (1 to 8
//    columns a thread, 32 to 256 threads) and odd widths;
// and the CTA counter is back at zero after every launch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/kernels/gemv_tail.h"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/core/error.h"
#include "rlx/core/half.h"
#include "tests/gpu/quant_test_util.h"

namespace {

using namespace rlx;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device bytes that free themselves.
struct Buf {
  void* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t bytes) : n(bytes) {
    EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, bytes ? bytes : 1), cudaSuccess);
  }
  Buf(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
  void put(const void* h) { EXPECT_EQ(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<uint8_t> get() const {
    std::vector<uint8_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// n random floats of dtype t (normal, scaled) as bytes.
std::vector<uint8_t> random_floats(DType t, int64_t n, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint8_t> b(static_cast<size_t>(n * dtype_size(t)));
  for (int64_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    if (t == DType::F32) std::memcpy(&b[4 * i], &v, 4);
    const uint16_t h = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
    if (t != DType::F32) std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

struct Case {
  DType w, io, cache;
  int q_heads, kv_heads, head_dim, n_rot;
  RopePairing pairing;
  bool norm;
  DType norm_dtype;
  std::string name() const {
    return str(dtype_name(w), " x ", dtype_name(io), " cache ", dtype_name(cache), " heads ", q_heads, "/", kv_heads,
               " D ", head_dim, " rot ", n_rot, pairing == RopePairing::NeoX ? " neox" : " interleaved",
               norm ? str(" norm ", dtype_name(norm_dtype)) : std::string(" no norm"));
  }
};

// Runs c both ways and compares; `slot`: the cache row to write (out of
// range: the flag is set and no row is written).
void check(const Case& c, int32_t slot, uint64_t seed) {
  SCOPED_TRACE(c.name() + str(" slot ", slot));
  std::mt19937_64 rng(seed);
  constexpr int64_t K = 512, kCapacity = 12;
  const int64_t qw = int64_t{c.q_heads} * c.head_dim, kw = int64_t{c.kv_heads} * c.head_dim, N = qw + 2 * kw;
  const auto w_host = test::random_data(c.w, N * K, rng);
  const auto x_host = random_floats(c.io, K, 1.0f, rng);
  Buf w(w_host.size()), x(x_host.size());
  w.put(w_host.data());
  x.put(x_host.data());
  ASSERT_TRUE(cuda::quant_gemv_takes_tail(c.w, w.p, 1, N, K));

  RopeAttrs qa;
  qa.num_heads = c.q_heads;
  qa.head_dim = c.head_dim;
  qa.n_rot = c.n_rot;
  qa.pairing = c.pairing;
  qa.freq_base = 10000.0f;
  qa.head_norm = c.norm;
  qa.norm_eps = 1e-6f;
  RopeAttrs ka = qa;
  ka.num_heads = c.kv_heads;
  ka.src_offset = static_cast<int>(qw);
  const auto qn_host = random_floats(c.norm_dtype, c.head_dim, 0.5f, rng);
  const auto kn_host = random_floats(c.norm_dtype, c.head_dim, 0.5f, rng);
  Buf qn(qn_host.size()), kn(kn_host.size());
  qn.put(qn_host.data());
  kn.put(kn_host.data());
  const int32_t pos_host = 1234, slot_host = slot;
  Buf pos(4), cpos(4), flag(4), counter(4);
  pos.put(&pos_host);
  cpos.put(&slot_host);
  const size_t cache_bytes = static_cast<size_t>(kCapacity * kw * dtype_size(c.cache));
  const auto cache_init = random_floats(c.cache, kCapacity * kw, 1.0f, rng);  // rows the launch must not touch

  cuda::RopeQkvWrite rw;
  rw.dtype = c.io;
  rw.cache_dtype = c.cache;
  rw.q_stride = rw.k_stride = rw.v_stride = N;
  rw.v_offset = qw + kw;
  rw.q_attrs = qa;
  rw.k_attrs = ka;
  rw.q_norm = c.norm ? qn.p : nullptr;
  rw.k_norm = c.norm ? kn.p : nullptr;
  rw.q_norm_dtype = rw.k_norm_dtype = c.norm_dtype;
  rw.positions = static_cast<const int32_t*>(pos.p);
  rw.cache_pos = static_cast<const int32_t*>(cpos.p);
  rw.B = rw.L = 1;
  rw.capacity = kCapacity;
  ASSERT_EQ(cuda::gemv_rope_tail_unsupported(rw), nullptr);
  Buf table(cuda::rope_angles_bytes(rw));

  // Both ways: y (the GEMV's output), the rotated Q, the caches, the flag.
  struct Out {
    std::vector<uint8_t> y, q, kc, vc;
    int32_t flag = 0, counter = 0;
  };
  auto run = [&](bool tail) {
    Buf y(static_cast<size_t>(N * dtype_size(c.io))), q(static_cast<size_t>(qw * dtype_size(c.io)));
    Buf kc(cache_bytes), vc(cache_bytes);
    kc.put(cache_init.data());
    vc.put(cache_init.data());
    EXPECT_EQ(cudaMemset(flag.p, 0, 4), cudaSuccess);
    cuda::RopeQkvWrite r = rw;
    r.q = r.k = r.v = y.p;
    r.y = q.p;
    r.k_cache = kc.p;
    r.v_cache = vc.p;
    r.error_flag = static_cast<int32_t*>(flag.p);
    r.angles.cs = static_cast<float2*>(table.p);
    if (tail) {
      cuda::GemvTail t;
      t.kind = cuda::GemvTailKind::Rope;
      t.rope = cuda::gemv_rope_tail(r);
      t.rope.angles = static_cast<const float2*>(table.p);
      t.counter = static_cast<int32_t*>(counter.p);
      // Twice: the counter must be ready for the next launch.
      for (int i = 0; i < 2; ++i) cuda::launch_quant_gemv(c.w, w.p, c.io, x.p, y.p, 1, N, K, nullptr, nullptr, &t);
    } else {
      cuda::launch_quant_gemv(c.w, w.p, c.io, x.p, y.p, 1, N, K, nullptr);
      r.angles.write = true;  // the first layer's launch: computes the angles and stores them
      cuda::launch_rope_qkv_write(r, nullptr);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Out o{y.get(), q.get(), kc.get(), vc.get()};
    EXPECT_EQ(cudaMemcpy(&o.flag, flag.p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&o.counter, counter.p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return o;
  };
  const Out ref = run(false);  // also fills the angle table
  const Out got = run(true);
  EXPECT_EQ(got.y, ref.y) << "GEMV output";
  EXPECT_EQ(got.q, ref.q) << "rotated Q";
  EXPECT_EQ(got.kc, ref.kc) << "K cache";
  EXPECT_EQ(got.vc, ref.vc) << "V cache";
  EXPECT_EQ(got.flag, ref.flag);
  EXPECT_EQ(got.counter, 0);
  const bool in_range = slot >= 0 && slot < kCapacity;
  EXPECT_EQ(ref.flag, in_range ? 0 : cuda::kErrSliceOutOfRange);
  // The values are not trivially equal: the rotated Q differs from the raw
  // projection, and an in-range slot's row changed.
  std::vector<uint8_t> raw_q(ref.y.begin(), ref.y.begin() + static_cast<ptrdiff_t>(ref.q.size()));
  EXPECT_NE(ref.q, raw_q);
  EXPECT_EQ(ref.kc != cache_init, in_range);
}

TEST(GemvTail, RopeSameBitsAsTheGemvThenTheRopeLaunch) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const RopePairing neox = RopePairing::NeoX, inter = RopePairing::Interleaved;
  const std::vector<Case> cases = {
      // Gemma 3 270M's layer: Q8_0 on int8 activations, D 256, one KV head, head norms.
      {DType::Q8_0, DType::BF16, DType::BF16, 4, 1, 256, 256, neox, true, DType::F32},
      {DType::Q8_0, DType::F32, DType::F16, 4, 1, 256, 256, neox, true, DType::F32},  // the CLI default
      {DType::Q4_K, DType::F16, DType::F16, 8, 2, 128, 128, neox, true, DType::BF16},
      // The f32-activation unit kernel (Q6_K, Q5_0), partial rotation, no norm.
      {DType::Q6_K, DType::BF16, DType::F32, 4, 2, 64, 32, inter, false, DType::F32},
      {DType::Q5_0, DType::F32, DType::F32, 2, 2, 128, 64, neox, true, DType::F16},
      {DType::Q5_0, DType::BF16, DType::BF16, 16, 4, 64, 64, inter, false, DType::F32},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) check(c, 5, seed++);
  check(cases[0], 11, seed++);  // the last row
}

TEST(GemvTail, RopeBadCacheOffsetFlagsAndWritesNoRow) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{DType::Q8_0, DType::BF16, DType::BF16, 4, 1, 256, 256, RopePairing::NeoX, true, DType::F32};
  check(c, 12, 7);  // = capacity
  check(c, -1, 8);
  const Case u{DType::Q6_K, DType::F32, DType::F16, 4, 2, 64, 64, RopePairing::Interleaved, false, DType::F32};
  check(u, 40, 9);
}

TEST(GemvTail, SaysWhyItCannotTakeARope) {
  cuda::RopeQkvWrite w;
  w.q_attrs.num_heads = 4;
  w.q_attrs.head_dim = 64;
  w.q_attrs.n_rot = 64;
  w.k_attrs = w.q_attrs;
  w.k_attrs.num_heads = 1;
  w.B = w.L = 1;
  EXPECT_EQ(cuda::gemv_rope_tail_unsupported(w), nullptr);
  w.L = 2;
  EXPECT_STREQ(cuda::gemv_rope_tail_unsupported(w), "more than one row");
  w.L = 1;
  w.k_attrs.head_dim = 128;
  w.k_attrs.n_rot = 128;
  EXPECT_NE(cuda::gemv_rope_tail_unsupported(w), nullptr);
  w.k_attrs = w.q_attrs;
  w.k_attrs.freq_base = 500000.0f;
  EXPECT_STREQ(cuda::gemv_rope_tail_unsupported(w), "Q and K turn by different angles");
  w.k_attrs = w.q_attrs;
  w.q_attrs.num_heads = w.k_attrs.num_heads = 64;  // 64 + 128 heads of 64: 48 KB of rows
  EXPECT_NE(cuda::gemv_rope_tail_unsupported(w), nullptr);
}

// The GEMV (W [cols, 512] of type w) then the post-norm (pair) of its
// product, both ways.
void check_post_norm(DType w_type, DType io, DType param, int64_t cols, bool pair, uint64_t seed) {
  SCOPED_TRACE(str(dtype_name(w_type), " x ", dtype_name(io), " params ", dtype_name(param), " cols ", cols,
                   pair ? " pair" : " single"));
  std::mt19937_64 rng(seed);
  constexpr int64_t K = 512;
  const auto w_host = test::random_data(w_type, cols * K, rng);
  const auto x_host = random_floats(io, K, 1.0f, rng);
  const auto res_host = random_floats(io, cols, 2.0f, rng);
  const auto w1_host = random_floats(param, cols, 0.5f, rng), w2_host = random_floats(param, cols, 0.5f, rng);
  Buf w(w_host.size()), x(x_host.size()), res(res_host.size()), w1(w1_host.size()), w2(w2_host.size()), counter(4);
  w.put(w_host.data());
  x.put(x_host.data());
  res.put(res_host.data());
  w1.put(w1_host.data());
  w2.put(w2_host.data());
  ASSERT_TRUE(cuda::quant_gemv_takes_tail(w_type, w.p, 1, cols, K));
  ASSERT_EQ(cuda::gemv_post_norm_tail_unsupported(cols), nullptr);
  const size_t row = static_cast<size_t>(cols * dtype_size(io));
  struct Out {
    std::vector<uint8_t> a, yh;
    int32_t counter = 0;
  };
  auto run = [&](bool tail) {
    Buf a(row), yh(2 * row);
    void* h = pair ? static_cast<char*>(yh.p) + row : nullptr;
    const void* w2p = pair ? w2.p : nullptr;
    if (tail) {
      cuda::GemvTail t;
      t.kind = cuda::GemvTailKind::PostNorm;
      t.norm.x = res.p;
      t.norm.w1 = w1.p;
      t.norm.w2 = w2p;
      t.norm.y = yh.p;
      t.norm.h = h;
      t.norm.param_dtype = param;
      t.norm.cols = static_cast<int>(cols);
      cuda::post_rms_norm_layout(cols, &t.norm.threads, &t.norm.per);
      t.norm.eps = 1e-6f;
      t.counter = static_cast<int32_t*>(counter.p);
      for (int i = 0; i < 2; ++i) cuda::launch_quant_gemv(w_type, w.p, io, x.p, a.p, 1, cols, K, nullptr, nullptr, &t);
    } else {
      cuda::launch_quant_gemv(w_type, w.p, io, x.p, a.p, 1, cols, K, nullptr);
      cuda::launch_post_rms_norm(io, param, res.p, a.p, w1.p, w2p, yh.p, h, 1, cols, 1e-6f, nullptr);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Out o{a.get(), yh.get()};
    EXPECT_EQ(cudaMemcpy(&o.counter, counter.p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return o;
  };
  const Out ref = run(false), got = run(true);
  EXPECT_EQ(got.a, ref.a) << "GEMV output";
  EXPECT_EQ(got.yh, ref.yh) << "post-norm results";
  EXPECT_EQ(got.counter, 0);
  const std::vector<uint8_t> y_ref(ref.yh.begin(), ref.yh.begin() + static_cast<ptrdiff_t>(row));
  EXPECT_NE(y_ref, res_host) << "the residual sum changed nothing";
}

TEST(GemvTail, PostNormSameBitsAsTheGemvThenTheNormLaunch) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 100;
  // Gemma 3 270M's two per layer: 640 columns (160 threads, 4 columns each), bf16 and f32.
  check_post_norm(DType::Q8_0, DType::BF16, DType::F32, 640, true, seed++);
  check_post_norm(DType::Q6_K, DType::F32, DType::F32, 640, true, seed++);
  // Every register layout: 32..256 threads, 1..8 columns a thread; odd widths; single norms.
  check_post_norm(DType::Q4_K, DType::F16, DType::F16, 100, true, seed++);
  check_post_norm(DType::Q5_0, DType::BF16, DType::BF16, 1000, false, seed++);
  check_post_norm(DType::Q8_0, DType::F32, DType::BF16, 2048, true, seed++);
  check_post_norm(DType::Q4_K, DType::BF16, DType::F32, 1536, true, seed++);
  check_post_norm(DType::Q6_K, DType::F16, DType::F32, 33, false, seed++);
}

TEST(GemvTail, PostNormTooWideIsRefused) {
  EXPECT_EQ(cuda::gemv_post_norm_tail_unsupported(2048), nullptr);
  EXPECT_NE(cuda::gemv_post_norm_tail_unsupported(2049), nullptr);
  EXPECT_NE(cuda::gemv_post_norm_tail_unsupported(0), nullptr);
}

}  // namespace
