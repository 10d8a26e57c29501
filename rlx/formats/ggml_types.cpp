#include "rlx/formats/ggml_types.h"

#include <array>

#include "rlx/core/error.h"

namespace rlx {
namespace {

struct GgmlType {
  uint32_t id;
  std::string_view name;
  std::optional<DType> dtype;  // nullopt: retired by ggml or not implemented by rlx
};

// ggml.h `enum ggml_type` (ggml-org/llama.cpp, 2026), ids in order.
constexpr std::array<GgmlType, 42> kTypes = {{
    {0, "f32", DType::F32},
    {1, "f16", DType::F16},
    {2, "q4_0", DType::Q4_0},
    {3, "q4_1", DType::Q4_1},
    {4, "q4_2", std::nullopt},  // removed from ggml in 2023
    {5, "q4_3", std::nullopt},  // removed from ggml in 2023
    {6, "q5_0", DType::Q5_0},
    {7, "q5_1", DType::Q5_1},
    {8, "q8_0", DType::Q8_0},
    {9, "q8_1", DType::Q8_1},
    {10, "q2_k", DType::Q2_K},
    {11, "q3_k", DType::Q3_K},
    {12, "q4_k", DType::Q4_K},
    {13, "q5_k", DType::Q5_K},
    {14, "q6_k", DType::Q6_K},
    {15, "q8_k", DType::Q8_K},
    {16, "iq2_xxs", DType::IQ2_XXS},
    {17, "iq2_xs", DType::IQ2_XS},
    {18, "iq3_xxs", DType::IQ3_XXS},
    {19, "iq1_s", DType::IQ1_S},
    {20, "iq4_nl", DType::IQ4_NL},
    {21, "iq3_s", DType::IQ3_S},
    {22, "iq2_s", DType::IQ2_S},
    {23, "iq4_xs", DType::IQ4_XS},
    {24, "i8", DType::I8},
    {25, "i16", DType::I16},
    {26, "i32", DType::I32},
    {27, "i64", DType::I64},
    {28, "f64", DType::F64},
    {29, "iq1_m", DType::IQ1_M},
    {30, "bf16", DType::BF16},
    {31, "q4_0_4_4", std::nullopt},  // repacked layouts, removed from GGUF files
    {32, "q4_0_4_8", std::nullopt},
    {33, "q4_0_8_8", std::nullopt},
    {34, "tq1_0", DType::TQ1_0},
    {35, "tq2_0", DType::TQ2_0},
    {36, "iq4_nl_4_4", std::nullopt},
    {37, "iq4_nl_4_8", std::nullopt},
    {38, "iq4_nl_8_8", std::nullopt},
    {39, "mxfp4", DType::MXFP4},
    {40, "nvfp4", DType::NVFP4},
    {41, "q1_0", DType::Q1_0},
}};

}  // namespace

std::optional<DType> dtype_from_ggml_opt(uint32_t ggml_type) {
  if (ggml_type >= kTypes.size()) return std::nullopt;
  return kTypes[ggml_type].dtype;
}

DType dtype_from_ggml(uint32_t ggml_type) {
  if (auto d = dtype_from_ggml_opt(ggml_type)) return *d;
  std::string_view name = ggml_type_name(ggml_type);
  RLX_FORMAT_CHECK(!name.empty(), "unknown ggml type id ", ggml_type);
  throw FormatError(str("ggml type ", ggml_type, " (", name, ") is not supported by rlx"));
}

std::optional<uint32_t> ggml_type_of(DType dtype) {
  for (const auto& t : kTypes)
    if (t.dtype == dtype) return t.id;
  return std::nullopt;
}

uint32_t ggml_type_id(DType dtype) {
  auto id = ggml_type_of(dtype);
  RLX_CHECK_AS(Unsupported, id.has_value(), "dtype ", dtype, " has no ggml type id");
  return *id;
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  return ggml_type < kTypes.size() ? kTypes[ggml_type].name : std::string_view{};
}

}  // namespace rlx
