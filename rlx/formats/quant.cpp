// Dispatch for the CPU (de)quantizers, the plain float/int conversions and
// ggml's original 32-element block formats (Q4_0 … Q8_1). The K-quants live in
// quant_k.cpp; the IQ, ternary and FP4 formats in quant_iq.cpp.
//
// Expressions keep ggml's evaluation order (e.g. `q * d + m`, never fused):
// the results must equal ggml's and the python gguf package's bit for bit.
#include "rlx/formats/quant.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "rlx/core/error.h"
#include "rlx/formats/quant_internal.h"

namespace rlx {
namespace quant_detail {
namespace {

// ---- scalar types: one element per "block" ----------------------------------

void dequant_f32(const uint8_t* s, float* y, int64_t n) { std::memcpy(y, s, static_cast<size_t>(n) * 4); }
void dequant_f16(const uint8_t* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = load_f16(s + 2 * i);
}
void dequant_bf16(const uint8_t* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(load_u16(s + 2 * i));
}
void dequant_f8e4m3(const uint8_t* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(s[i]);
}
void dequant_f8e5m2(const uint8_t* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp8_e5m2_to_f32(s[i]);
}
template <typename T>
void dequant_number(const uint8_t* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + sizeof(T) * i, sizeof(T));
    y[i] = static_cast<float>(v);
  }
}

void quant_f32(const float* x, uint8_t* d, int64_t n) { std::memcpy(d, x, static_cast<size_t>(n) * 4); }
void quant_f16(const float* x, uint8_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f16(d + 2 * i, x[i]);
}
void quant_bf16(const float* x, uint8_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

// ---- 32-element legacy blocks (ggml-common.h block_q4_0 … block_q8_1) -------
//  q4_0: f16 d, u8 qs[16]                 x = (q - 8) * d
//  q4_1: f16 d, f16 m, u8 qs[16]          x = q * d + m
//  q5_0: f16 d, u32 qh, u8 qs[16]         x = (q - 16) * d   (5th bit from qh)
//  q5_1: f16 d, f16 m, u32 qh, u8 qs[16]  x = q * d + m
//  q8_0: f16 d, i8 qs[32]                 x = q * d
//  q8_1: f16 d, f16 s, i8 qs[32]          x = q * d  (s = d * Σq, for dot products only)
// Nibble j of qs holds element j (low) and element j + 16 (high).

RLX_DEQUANT_MULTIVERSION
void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    const float d = load_f16(b), m = load_f16(b + 2);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = load_f16(b);
    const uint32_t qh = load_u32(b + 2);
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>(((b[6 + j] & 0xF) | h0) - 16) * d;
      y[j + 16] = static_cast<float>(((b[6 + j] >> 4) | h1) - 16) * d;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 24, y += 32) {
    const float d = load_f16(b), m = load_f16(b + 2);
    const uint32_t qh = load_u32(b + 4);
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>((b[8 + j] & 0xF) | h0) * d + m;
      y[j + 16] = static_cast<float>((b[8 + j] >> 4) | h1) * d + m;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = load_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

// Q1_0: f16 d, then one bit per element (element j: bit j % 8 of byte j / 8),
// set → +d, clear → −d.
void dequant_q1_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 128) {
    const float d = load_f16(b);
    for (int j = 0; j < 128; ++j) y[j] = (b[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
  }
}

void dequant_q8_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 36, y += 32) {
    const float d = load_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
  }
}

// C's `MIN(hi, (int8_t)v)` for the v the quantizers produce, but defined for
// every float (a NaN input yields lo instead of undefined behaviour).
int trunc_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// roundf (halves away from zero) clamped to [lo, hi]; NaN yields lo.
int round_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::round(v));
}

// Signed value of largest magnitude (the first one on ties), as ggml picks it.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& mn, float& mx) {
  mn = std::numeric_limits<float>::max();
  mx = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
}

// Q1_0: each element's sign (≥ 0 sets the bit) and d = mean |x|, the d that
// minimizes Σ (x − d·sign x)².
void quant_q1_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 128, b += 18) {
    float sum = 0.0f;
    for (int j = 0; j < 128; ++j) sum += std::fabs(x[j]);
    store_f16(b, sum / 128.0f);
    std::memset(b + 2, 0, 16);
    for (int j = 0; j < 128; ++j)
      if (x[j] >= 0.0f) b[2 + j / 8] = static_cast<uint8_t>(b[2 + j / 8] | (1u << (j % 8)));
  }
}

void quant_q4_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 18) {
    const float d = signed_absmax(x, 32) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = trunc_clamp(x[j] * id + 8.5f, 0, 15), q1 = trunc_clamp(x[16 + j] * id + 8.5f, 0, 15);
      b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quant_q4_1(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 20) {
    float mn, mx;
    min_max(x, 32, mn, mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 15), q1 = trunc_clamp((x[16 + j] - mn) * id + 0.5f, 0, 15);
      b[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quant_q5_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 22) {
    const float d = signed_absmax(x, 32) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = trunc_clamp(x[j] * id + 16.5f, 0, 31), q1 = trunc_clamp(x[16 + j] * id + 16.5f, 0, 31);
      b[6 + j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j | static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(b + 2, &qh, 4);
  }
}

void quant_q5_1(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 24) {
    float mn, mx;
    min_max(x, 32, mn, mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 31), q1 = trunc_clamp((x[16 + j] - mn) * id + 0.5f, 0, 31);
      b[8 + j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j | static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(b + 4, &qh, 4);
  }
}

void quant_q8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < 32; ++j)
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_clamp(x[j] * id, -127, 127)));
  }
}

// ---- dispatch -----------------------------------------------------------------

struct Kernels {
  DType type;
  DequantFn dequant;
  QuantFn quant;  // nullptr: no CPU quantizer
};

constexpr Kernels kKernels[] = {
    {DType::F32, dequant_f32, quant_f32},
    {DType::F16, dequant_f16, quant_f16},
    {DType::BF16, dequant_bf16, quant_bf16},
    {DType::F64, dequant_number<double>, nullptr},
    {DType::I8, dequant_number<int8_t>, nullptr},
    {DType::U8, dequant_number<uint8_t>, nullptr},
    {DType::I16, dequant_number<int16_t>, nullptr},
    {DType::I32, dequant_number<int32_t>, nullptr},
    {DType::I64, dequant_number<int64_t>, nullptr},
    {DType::Bool, dequant_number<uint8_t>, nullptr},
    {DType::F8E4M3, dequant_f8e4m3, nullptr},
    {DType::F8E5M2, dequant_f8e5m2, nullptr},
    {DType::Q4_0, dequant_q4_0, quant_q4_0},
    {DType::Q4_1, dequant_q4_1, quant_q4_1},
    {DType::Q5_0, dequant_q5_0, quant_q5_0},
    {DType::Q5_1, dequant_q5_1, quant_q5_1},
    {DType::Q8_0, dequant_q8_0, quant_q8_0},
    {DType::Q8_1, dequant_q8_1, nullptr},
    {DType::Q2_K, dequant_q2_k, nullptr},
    {DType::Q3_K, dequant_q3_k, nullptr},
    {DType::Q4_K, dequant_q4_k, quant_q4_k},
    {DType::Q5_K, dequant_q5_k, nullptr},
    {DType::Q6_K, dequant_q6_k, quant_q6_k},
    {DType::Q8_K, dequant_q8_k, nullptr},
    {DType::IQ2_XXS, dequant_iq2_xxs, nullptr},
    {DType::IQ2_XS, dequant_iq2_xs, nullptr},
    {DType::IQ3_XXS, dequant_iq3_xxs, nullptr},
    {DType::IQ1_S, dequant_iq1_s, nullptr},
    {DType::IQ4_NL, dequant_iq4_nl, nullptr},
    {DType::IQ3_S, dequant_iq3_s, nullptr},
    {DType::IQ2_S, dequant_iq2_s, nullptr},
    {DType::IQ4_XS, dequant_iq4_xs, nullptr},
    {DType::IQ1_M, dequant_iq1_m, nullptr},
    {DType::TQ1_0, dequant_tq1_0, nullptr},
    {DType::TQ2_0, dequant_tq2_0, nullptr},
    {DType::MXFP4, dequant_mxfp4, nullptr},
    {DType::NVFP4, dequant_nvfp4, nullptr},
    {DType::Q1_0, dequant_q1_0, quant_q1_0},
};

constexpr auto kByType = [] {
  std::array<const Kernels*, static_cast<size_t>(DType::Count_)> a{};
  for (const Kernels& k : kKernels) a[static_cast<size_t>(k.type)] = &k;
  return a;
}();

const Kernels* kernels(DType t) {
  const auto i = static_cast<size_t>(t);
  return i < kByType.size() ? kByType[i] : nullptr;
}

int64_t checked_blocks(DType type, int64_t n, const char* what) {
  const DTypeInfo& info = dtype_info(type);
  RLX_CHECK(n >= 0 && n % info.block_elems == 0, what, "(", info.name, "): ", n,
            " elements is not a multiple of the block size ", info.block_elems);
  return n / info.block_elems;
}

}  // namespace
}  // namespace quant_detail

using namespace quant_detail;

bool has_cpu_dequant(DType type) { return kernels(type) != nullptr; }

bool has_cpu_quantize(DType type) {
  const Kernels* k = kernels(type);
  return k && k->quant;
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const Kernels* k = kernels(type);
  RLX_CHECK_AS(Unsupported, k, "dequantize_row: no CPU dequantization for ", type);
  k->dequant(static_cast<const uint8_t*>(src), dst, checked_blocks(type, n, "dequantize_row"));
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const Kernels* k = kernels(type);
  RLX_CHECK_AS(Unsupported, k && k->quant, "quantize_row: no CPU quantizer for ", type);
  k->quant(src, static_cast<uint8_t*>(dst), checked_blocks(type, n, "quantize_row"));
}

Tensor dequantize(const Tensor& t) {
  Tensor out = Tensor::empty(DType::F32, t.shape());
  if (t.numel() > 0) dequantize_row(t.dtype(), t.raw(), out.data<float>(), t.numel());
  return out;
}

Tensor quantize(const Tensor& f32, DType type) {
  RLX_CHECK(f32.dtype() == DType::F32, "quantize: input is ", f32.dtype(), ", expected f32");
  const int64_t block = dtype_info(type).block_elems;
  RLX_SHAPE_CHECK(f32.rank() > 0 ? f32.dim(-1) % block == 0 : block == 1, "quantize: shape ", shape_str(f32.shape()),
                  " has rows that are not whole ", type, " blocks of ", block);
  Tensor out = Tensor::empty(type, f32.shape());
  if (f32.numel() > 0) quantize_row(type, f32.data<float>(), out.raw_mut(), f32.numel());
  return out;
}

bool converts_to_q8_0(DType type) { return type == DType::Q4_0 || type == DType::Q5_0 || type == DType::Q8_0; }

void convert_to_q8_0(DType type, const void* src, void* dst, int64_t n) {
  RLX_CHECK_AS(Unsupported, converts_to_q8_0(type), "convert_to_q8_0: ", type, " has no exact Q8_0 form");
  const int64_t nb = checked_blocks(type, n, "convert_to_q8_0");
  const auto* b = static_cast<const uint8_t*>(src);
  auto* o = static_cast<uint8_t*>(dst);
  if (type == DType::Q8_0) {
    std::memcpy(o, b, static_cast<size_t>(nb) * 34);
    return;
  }
  const int bytes = type == DType::Q4_0 ? 18 : 22;
  for (int64_t i = 0; i < nb; ++i, b += bytes, o += 34) {
    std::memcpy(o, b, 2);  // the f16 scale d
    auto* q = reinterpret_cast<int8_t*>(o + 2);
    if (type == DType::Q4_0) {
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((b[2 + j] & 0xF) - 8);
        q[j + 16] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
      }
    } else {
      const uint32_t qh = load_u32(b + 2);
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        q[j] = static_cast<int8_t>(((b[6 + j] & 0xF) | h0) - 16);
        q[j + 16] = static_cast<int8_t>(((b[6 + j] >> 4) | h1) - 16);
      }
    }
  }
}

}  // namespace rlx
