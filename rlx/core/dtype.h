// Element types. Scalar types have a fixed byte size; packed quant types
// (every GGUF block format, NVFP4) are stored as opaque blocks of
// `block_elems()` elements in `block_bytes()` bytes.
#pragma once
#include <complex>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rlx {

enum class DType : uint8_t {
  F32, F16, BF16, F64, I8, U8, I16, I32, I64, Bool, C64, F8E4M3, F8E5M2,
  // Packed GGUF quant types, in ggml type-id order where one exists.
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
  IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M,
  TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0,
  Count_,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // 1 for scalar types
  int64_t block_bytes;  // bytes per block (= element size for scalars)
  bool is_float;        // real floating point (f32/f16/bf16/f64/fp8)
  bool is_int;          // signed or unsigned integer (not bool)
  bool is_quant;        // packed block format
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_float(DType t) { return dtype_info(t).is_float; }
inline bool is_int(DType t) { return dtype_info(t).is_int; }
inline bool is_quant(DType t) { return dtype_info(t).is_quant; }
// f32, f16, bf16: the types kernels compute on (always accumulating in f32).
inline bool is_compute_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}
// Byte size of one element of a scalar type; throws for quant types.
int64_t dtype_size(DType t);
// Bytes needed for `n` elements; throws if `n` is not a multiple of the block.
int64_t dtype_bytes(DType t, int64_t n);
std::optional<DType> dtype_from_name(std::string_view name);

std::ostream& operator<<(std::ostream& os, DType t);

// C++ type → DType for typed I/O.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::I16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<std::complex<float>> { static constexpr DType value = DType::C64; };
template <typename T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace rlx
