#include "rlx/backends/cpu/kernel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>

#include "rlx/backends/cpu/buffer_pool.h"
#include "rlx/backends/cpu/kernels/gemm.h"  // RLX_CPU_MULTIVERSION
#include "rlx/core/half.h"
#include "rlx/ir/shape.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RLX_CPU_F16C 1
#endif

namespace rlx::cpu {

KernelArgs::KernelArgs(const Graph& g, NodeId nid, std::vector<const void*> in, void* out, ThreadPool& p)
    : graph(g), id(nid), node(g.node(nid)), pool(p), in_(std::move(in)), out_(out) {
  for (NodeId i : node.inputs) in_dims_.push_back(static_dims(g.node(i).type.shape));
  out_dims_ = static_dims(node.type.shape);
  in_scratch_.resize(in_.size());
}

int64_t KernelArgs::in_numel(size_t i) const { return shape_numel(in_dims_[i]); }
int64_t KernelArgs::out_numel() const { return shape_numel(out_dims_); }

// Without branches, so the loops vectorize (a clone per ISA).
RLX_CPU_MULTIVERSION
void bf16_to_f32_n(const uint16_t* __restrict s, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(s[i]) << 16;
    std::memcpy(dst + i, &x, 4);
  }
}

namespace {

#if RLX_CPU_F16C
// Asked as AVX2, which every CPU with it pairs with F16C: clang's
// __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

inline uint16_t bf16_bits_rounded(uint32_t x) {
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

RLX_CPU_MULTIVERSION
void f32_to_bf16_loop(const float* __restrict s, uint16_t* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, s + i, 4);
    dst[i] = bf16_bits_rounded(x);
  }
}

#if RLX_CPU_F16C
// AVX512-BF16 converts 32 values an instruction, rounding to nearest even and
// quieting NaNs exactly as the loop does, but it flushes denormal inputs to
// zero (checked over all 2^32 inputs): a group of 32 holding one takes the
// loop. 3-6x the loop's rate on data in cache, 1.3x from memory.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) int64_t f32_to_bf16_avx512(const float* s, uint16_t* dst,
                                                                                  int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 16);
    const __mmask16 denormal_a = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(a, exponent), a, mantissa);
    const __mmask16 denormal_b = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(b, exponent), b, mantissa);
    if (denormal_a | denormal_b) {
      f32_to_bf16_loop(s + i, dst + i, 32);
      continue;
    }
    const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));
    std::memcpy(dst + i, &packed, sizeof packed);
  }
  return i;
}
#endif

}  // namespace

void f32_to_bf16_n(const float* __restrict s, uint16_t* __restrict dst, int64_t n) {
  int64_t i = 0;
#if RLX_CPU_F16C
  static const bool bf16_insn = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  if (bf16_insn) i = f32_to_bf16_avx512(s, dst, n);
#endif
  f32_to_bf16_loop(s + i, dst + i, n - i);
}

// F16C rounds to nearest even exactly as f32_to_f16 does, denormal results
// included, but keeps part of a NaN's payload where f32_to_f16 writes the
// canonical quiet NaN (checked over all 2^32 inputs): a group of eight holding
// a NaN takes the scalar conversion.
void f32_to_f16_n(const float* s, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if RLX_CPU_F16C
  if (has_f16c()) i = [&]() __attribute__((target("avx,f16c"))) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_loadu_ps(s + j);
      if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
        for (int64_t e = j; e < j + 8; ++e) dst[e] = f32_to_f16(s[e]);
        continue;
      }
      const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), h);
    }
    return j;
  }();
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16(s[i]);
}

namespace {

// f16 → f32 is exact either way; the F16C instruction does eight at a time
// (an f16 KV cache is widened this way on every decode step).
void f16_to_f32_n(const uint16_t* s, float* dst, int64_t n) {
  int64_t i = 0;
#if RLX_CPU_F16C
  if (has_f16c()) i = [&]() __attribute__((target("avx,f16c"))) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j))));
    return j;
  }();
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

// fp8 → f32 is exact: all 256 codes decoded once.
template <DType T>
void fp8_to_f32_n(const uint8_t* s, float* dst, int64_t n) {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c)
      t[static_cast<size_t>(c)] = T == DType::F8E4M3 ? fp8_e4m3_to_f32(static_cast<uint8_t>(c))
                                                     : fp8_e5m2_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]];
}

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F8E4M3: return fp8_to_f32_n<DType::F8E4M3>(static_cast<const uint8_t*>(src), dst, n);
    case DType::F8E5M2: return fp8_to_f32_n<DType::F8E5M2>(static_cast<const uint8_t*>(src), dst, n);
    case DType::F16: return f16_to_f32_n(static_cast<const uint16_t*>(src), dst, n);
    case DType::BF16: return bf16_to_f32_n(static_cast<const uint16_t*>(src), dst, n);
    case DType::F64: {
      auto* s = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default: throw Unsupported(str("cpu: no f32 staging for ", t));
  }
}

void from_f32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F16: return f32_to_f16_n(src, static_cast<uint16_t*>(dst), n);
    case DType::BF16: return f32_to_bf16_n(src, static_cast<uint16_t*>(dst), n);
    case DType::F64: {
      auto* d = static_cast<double*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    default: throw Unsupported(str("cpu: no f32 staging for ", t));
  }
}

}  // namespace

namespace {

// At most 8 (a kernel's inputs and output, a few threads' kernels) and 256 MB kept.
BufferPool<float[]>& staging_pool() {
  static BufferPool<float[]> pool(8, size_t{256} << 20);
  return pool;
}

}  // namespace

StagingBuffer::StagingBuffer(size_t n) {
  const size_t bytes = std::max<size_t>(n, 1) * sizeof(float);
  auto [b, have] = staging_pool().take(bytes);
  if (!b) {
    b.reset(new float[bytes / sizeof(float)]);  // not value-initialized: no memset
    have = bytes;
  }
  data_ = std::move(b);
  bytes_ = have;
}

StagingBuffer::~StagingBuffer() {
  if (data_) staging_pool().give(std::move(data_), bytes_);
}

void StagingBuffer::trim() { staging_pool().clear(); }

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) staging_pool().give(std::move(data_), bytes_);
    data_ = std::move(o.data_);
    bytes_ = o.bytes_;
  }
  return *this;
}

// Conversions run on the pool in chunks; element size is 2 or 8 bytes.
constexpr int64_t kConvertGrain = 1 << 14;

const float* KernelArgs::in_f32(size_t i) {
  DType t = in_dtype(i);
  if (t == DType::F32) return in<float>(i);
  auto& s = in_scratch_[i];
  if (s.empty() && in_numel(i) > 0) {
    RLX_CHECK_AS(Unsupported,
                 t == DType::F16 || t == DType::BF16 || t == DType::F64 || t == DType::F8E4M3 || t == DType::F8E5M2,
                 where(), ": input ", i, " of dtype ", t, " has no f32 staging");
    s = StagingBuffer(static_cast<size_t>(in_numel(i)));
    const auto* src = static_cast<const char*>(in_[i]);
    const int64_t es = dtype_size(t);
    float* dst = s.data();
    pool.parallel_for(in_numel(i), kConvertGrain,
                      [&](int64_t b, int64_t e) { to_f32(t, src + b * es, dst + b, e - b); });
  }
  return s.data();
}

const float* KernelArgs::in_f32_rows(size_t i, int64_t outer, int64_t rows, int64_t row_elems, const int64_t* used) {
  const DType t = in_dtype(i);
  if (t == DType::F32) return in<float>(i);
  RLX_CHECK(outer * rows * row_elems == in_numel(i), where(), ": input ", i, " is not [", outer, ", ", rows, ", ",
            row_elems, "]");
  RLX_CHECK_AS(Unsupported, t == DType::F16 || t == DType::BF16 || t == DType::F64, where(), ": input ", i,
               " of dtype ", t, " has no f32 staging");
  if (in_partial_.size() <= i) in_partial_.resize(i + 1);
  in_partial_[i] = StagingBuffer(static_cast<size_t>(in_numel(i)));
  const auto* src = static_cast<const char*>(in_[i]);
  const int64_t es = dtype_size(t);
  float* dst = in_partial_[i].data();
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t first = o * rows * row_elems, n = std::clamp<int64_t>(used[o], 0, rows) * row_elems;
    pool.parallel_for(n, kConvertGrain,
                      [&](int64_t b, int64_t e) { to_f32(t, src + (first + b) * es, dst + first + b, e - b); });
  }
  return dst;
}

float* KernelArgs::out_f32() {
  if (out_dtype() == DType::F32) return out<float>();
  if (!out_staged_) {
    out_scratch_ = StagingBuffer(static_cast<size_t>(out_numel()));
    out_staged_ = true;
  }
  return out_scratch_.data();
}

std::shared_ptr<const void> ParamCache::get(const std::string& key,
                                            const std::function<std::shared_ptr<const void>()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& entry = entries_[key];
  if (!entry) entry = make();
  return entry;
}

void ParamCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

void KernelArgs::finish() {
  if (!out_staged_) return;
  const DType t = out_dtype();
  RLX_CHECK_AS(Unsupported, t == DType::F16 || t == DType::BF16 || t == DType::F64, where(), ": output dtype ", t,
               " has no f32 staging");
  const int64_t es = dtype_size(t);
  const float* src = out_scratch_.data();
  auto* dst = static_cast<char*>(out_);
  pool.parallel_for(out_numel(), kConvertGrain, [&](int64_t b, int64_t e) { from_f32(t, src + b, dst + b * es, e - b); });
}

void register_cpu_kernel(OpKind op, std::vector<DType> signature, CpuKernel fn, std::string description,
                         bool variadic, std::string custom_name) {
  KernelRegistry::global().add(KernelKey{op, kCpuBackend, std::move(signature), std::move(custom_name), variadic},
                               std::move(fn), std::move(description));
}

void register_cpu_float_kernel(OpKind op, std::vector<DType> signature, const CpuKernel& fn,
                               const std::string& description, bool variadic) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    auto sig = signature;
    for (auto& d : sig)
      if (d == DType::F32) d = t;
    register_cpu_kernel(op, sig, fn, str(description, " [", dtype_name(t), t == DType::F32 ? "" : " storage, f32 compute", "]"),
                        variadic);
  }
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

void register_all_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_kernels();
    register_matmul_kernels();
    register_norm_kernels();
    register_reduce_kernels();
    register_select_kernels();
    register_movement_kernels();
    register_attention_kernels();
    register_quant_kernels();
    register_fft_kernels();
    register_splat_kernels();
  });
}

}  // namespace rlx::cpu
