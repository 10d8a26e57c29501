#include "rlx/core/dtype.h"

#include <array>
#include <ostream>

#include "rlx/core/error.h"

namespace rlx {
namespace {

// Block sizes follow ggml's block structs (ggml-common.h); NVFP4 is 16 e2m1
// values with one e4m3 scale per 16 → 64 elements in 36 bytes (4 sub-blocks).
constexpr std::array<DTypeInfo, static_cast<size_t>(DType::Count_)> kInfo = {{
    {"f32", 1, 4, true, false, false},
    {"f16", 1, 2, true, false, false},
    {"bf16", 1, 2, true, false, false},
    {"f64", 1, 8, true, false, false},
    {"i8", 1, 1, false, true, false},
    {"u8", 1, 1, false, true, false},
    {"i16", 1, 2, false, true, false},
    {"i32", 1, 4, false, true, false},
    {"i64", 1, 8, false, true, false},
    {"bool", 1, 1, false, false, false},
    {"c64", 1, 8, false, false, false},
    {"f8e4m3", 1, 1, true, false, false},
    {"f8e5m2", 1, 1, true, false, false},
    {"q4_0", 32, 18, false, false, true},
    {"q4_1", 32, 20, false, false, true},
    {"q5_0", 32, 22, false, false, true},
    {"q5_1", 32, 24, false, false, true},
    {"q8_0", 32, 34, false, false, true},
    {"q8_1", 32, 36, false, false, true},
    {"q2_k", 256, 84, false, false, true},
    {"q3_k", 256, 110, false, false, true},
    {"q4_k", 256, 144, false, false, true},
    {"q5_k", 256, 176, false, false, true},
    {"q6_k", 256, 210, false, false, true},
    {"q8_k", 256, 292, false, false, true},
    {"iq2_xxs", 256, 66, false, false, true},
    {"iq2_xs", 256, 74, false, false, true},
    {"iq3_xxs", 256, 98, false, false, true},
    {"iq1_s", 256, 50, false, false, true},
    {"iq4_nl", 32, 18, false, false, true},
    {"iq3_s", 256, 110, false, false, true},
    {"iq2_s", 256, 82, false, false, true},
    {"iq4_xs", 256, 136, false, false, true},
    {"iq1_m", 256, 56, false, false, true},
    {"tq1_0", 256, 54, false, false, true},
    {"tq2_0", 256, 66, false, false, true},
    {"mxfp4", 32, 17, false, false, true},
    {"nvfp4", 64, 36, false, false, true},
    {"q1_0", 128, 18, false, false, true},
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  RLX_CHECK(i < kInfo.size(), "invalid dtype value ", i);
  return kInfo[i];
}

int64_t dtype_size(DType t) {
  const auto& info = dtype_info(t);
  RLX_CHECK(!info.is_quant, "dtype ", info.name, " is a packed block type; it has no element size");
  return info.block_bytes;
}

int64_t dtype_bytes(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  RLX_CHECK(n >= 0, "negative element count ", n);
  RLX_SHAPE_CHECK(n % info.block_elems == 0, "dtype ", info.name, ": element count ", n,
                  " is not a multiple of its block size ", info.block_elems);
  return n / info.block_elems * info.block_bytes;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace rlx
