#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

namespace rlx {
namespace {

std::vector<DType> all_dtypes() {
  std::vector<DType> v;
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) v.push_back(static_cast<DType>(i));
  return v;
}

TEST(DType, NamesRoundTripAndAreUnique) {
  std::set<std::string_view> names;
  for (DType t : all_dtypes()) {
    const auto name = dtype_name(t);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    auto back = dtype_from_name(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, t) << name;
  }
  EXPECT_FALSE(dtype_from_name("float32").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_FALSE(dtype_from_name("F32").has_value());  // names are lower case
}

TEST(DType, Streams) {
  std::ostringstream os;
  os << DType::BF16 << " " << DType::Q4_K;
  EXPECT_EQ(os.str(), "bf16 q4_k");
}

TEST(DType, ScalarSizes) {
  EXPECT_EQ(dtype_size(DType::F32), 4);
  EXPECT_EQ(dtype_size(DType::F16), 2);
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::F64), 8);
  EXPECT_EQ(dtype_size(DType::I8), 1);
  EXPECT_EQ(dtype_size(DType::U8), 1);
  EXPECT_EQ(dtype_size(DType::I16), 2);
  EXPECT_EQ(dtype_size(DType::I32), 4);
  EXPECT_EQ(dtype_size(DType::I64), 8);
  EXPECT_EQ(dtype_size(DType::Bool), 1);
  EXPECT_EQ(dtype_size(DType::C64), 8);
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1);
  EXPECT_EQ(dtype_size(DType::F8E5M2), 1);
}

TEST(DType, QuantTypesHaveNoElementSize) {
  for (DType t : all_dtypes()) {
    if (!is_quant(t)) continue;
    EXPECT_THROW(dtype_size(t), InvalidArgument) << t;
    EXPECT_GT(dtype_info(t).block_elems, 1) << t;
  }
}

TEST(DType, QuantBlockBytes) {
  // ggml-common.h block structs.
  EXPECT_EQ(dtype_bytes(DType::Q4_0, 32), 18);   // f16 d + 16 nibble bytes
  EXPECT_EQ(dtype_bytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(dtype_bytes(DType::Q8_0, 32), 34);   // f16 d + 32 int8
  EXPECT_EQ(dtype_bytes(DType::Q4_K, 256), 144);
  EXPECT_EQ(dtype_bytes(DType::Q6_K, 512), 420);
  EXPECT_EQ(dtype_bytes(DType::IQ4_NL, 32), 18);
  EXPECT_EQ(dtype_bytes(DType::NVFP4, 64), 36);
  EXPECT_EQ(dtype_bytes(DType::Q1_0, 256), 36);
  EXPECT_EQ(dtype_bytes(DType::Q4_K, 0), 0);
  EXPECT_EQ(dtype_bytes(DType::F16, 3), 6);
}

TEST(DType, QuantBytesRejectPartialBlocks) {
  EXPECT_THROW(dtype_bytes(DType::Q4_0, 33), ShapeError);
  EXPECT_THROW(dtype_bytes(DType::Q4_0, 16), ShapeError);
  EXPECT_THROW(dtype_bytes(DType::Q4_K, 32), ShapeError);  // a multiple of 32 but not of 256
  EXPECT_THROW(dtype_bytes(DType::NVFP4, 16), ShapeError);
  EXPECT_THROW(dtype_bytes(DType::Q1_0, 64), ShapeError);
  EXPECT_THROW(dtype_bytes(DType::F32, -1), InvalidArgument);
}

TEST(DType, Flags) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::F8E4M3, DType::F8E5M2})
    EXPECT_TRUE(is_float(t)) << t;
  for (DType t : {DType::I8, DType::U8, DType::I16, DType::I32, DType::I64}) {
    EXPECT_TRUE(is_int(t)) << t;
    EXPECT_FALSE(is_float(t)) << t;
  }
  EXPECT_FALSE(is_int(DType::Bool));
  EXPECT_FALSE(is_float(DType::Bool));
  EXPECT_FALSE(is_float(DType::C64));
  EXPECT_TRUE(is_quant(DType::Q4_K));
  EXPECT_TRUE(is_quant(DType::NVFP4));
  EXPECT_FALSE(is_quant(DType::F8E4M3));
  EXPECT_FALSE(is_float(DType::Q8_0));
  EXPECT_TRUE(is_compute_float(DType::BF16));
  EXPECT_FALSE(is_compute_float(DType::F64));
  for (DType t : all_dtypes()) {
    const auto& i = dtype_info(t);
    EXPECT_LE(int(i.is_float) + int(i.is_int) + int(i.is_quant), 1) << t;
    EXPECT_EQ(i.block_elems == 1, !i.is_quant) << t;
  }
}

TEST(DType, InvalidValueThrows) {
  EXPECT_THROW(dtype_info(DType::Count_), InvalidArgument);
}

TEST(DType, CppTypeMapping) {
  static_assert(dtype_of_v<float> == DType::F32);
  static_assert(dtype_of_v<int32_t> == DType::I32);
  static_assert(dtype_of_v<int64_t> == DType::I64);
  static_assert(dtype_of_v<bool> == DType::Bool);
  static_assert(dtype_of_v<uint8_t> == DType::U8);
}

}  // namespace
}  // namespace rlx
