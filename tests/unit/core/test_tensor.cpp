#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/core/tensor.h"

namespace rlx {
namespace {

TEST(Tensor, FromAndToVector) {
  Tensor t = Tensor::from<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor ids = Tensor::from<int32_t>({7, 8}, {2});
  EXPECT_EQ(ids.dtype(), DType::I32);
}

TEST(Tensor, FromWrongCountThrows) {
  EXPECT_THROW(Tensor::from<float>({1.f, 2.f, 3.f}, {2, 2}), InvalidArgument);
}

TEST(Tensor, WrongTypedAccessThrows) {
  Tensor t = Tensor::from<float>({1.f}, {1});
  EXPECT_THROW(t.data<int32_t>(), InvalidArgument);
  EXPECT_THROW(t.to_vector<double>(), InvalidArgument);
  EXPECT_THROW(t.dim(1), InvalidArgument);
  EXPECT_THROW(t.dim(-2), InvalidArgument);
}

TEST(Tensor, ScalarAndEmptyShapes) {
  Tensor s = Tensor::zeros(DType::F32, {});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.to_vector<float>(), std::vector<float>{0.f});
  Tensor e = Tensor::zeros(DType::F32, {0, 5});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0u);
  EXPECT_TRUE(e.defined());
  EXPECT_THROW(Tensor::empty(DType::F32, {2, -1}), ShapeError);
  EXPECT_THROW(Tensor::empty(DType::F32, {int64_t{1} << 40, int64_t{1} << 40}), ShapeError);
}

TEST(Tensor, CopiesAreShallowCloneIsDeep) {
  Tensor a = Tensor::from<float>({1.f, 2.f}, {2});
  Tensor b = a;
  Tensor c = a.clone();
  a.data<float>()[0] = 9.f;
  EXPECT_EQ(b.to_vector<float>()[0], 9.f);
  EXPECT_EQ(c.to_vector<float>()[0], 1.f);
}

TEST(Tensor, Reshaped) {
  Tensor a = Tensor::from<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  Tensor r = a.reshaped({3, 2});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r.raw(), a.raw());  // same bytes
  EXPECT_EQ(a.reshaped({6}).to_vector<float>(), a.to_vector<float>());
  EXPECT_THROW(a.reshaped({4, 2}), ShapeError);
  EXPECT_THROW(a.reshaped({7}), ShapeError);
  EXPECT_THROW(a.reshaped({-6}), ShapeError);
}

TEST(Tensor, FloatConversions) {
  Tensor a = Tensor::from<float>({1.0f, -2.5f, 65504.0f, 1e6f}, {4});
  Tensor h = a.to(DType::F16);
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(h.nbytes(), 8u);
  const auto* bits = static_cast<const uint16_t*>(h.raw());
  EXPECT_EQ(bits[0], 0x3c00);
  EXPECT_EQ(bits[1], 0xc100);
  EXPECT_EQ(bits[2], 0x7bff);
  EXPECT_EQ(bits[3], 0x7c00);  // overflow to inf
  Tensor back = h.to(DType::F32);
  EXPECT_EQ(back.to_vector<float>()[1], -2.5f);

  Tensor b = a.to(DType::BF16);
  EXPECT_EQ(static_cast<const uint16_t*>(b.raw())[0], 0x3f80);
  EXPECT_EQ(b.to_f64()[1], -2.5);

  Tensor e = a.to(DType::F8E4M3);
  EXPECT_EQ(static_cast<const uint8_t*>(e.raw())[0], 0x38);
  EXPECT_EQ(e.to_f64()[3], 448.0);  // saturates

  Tensor d = a.to(DType::F64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.0, -2.5, 65504.0, 1e6}));
}

TEST(Tensor, IntConversions) {
  Tensor a = Tensor::from<float>({2.7f, -2.7f, 0.0f}, {3});
  EXPECT_EQ(a.to(DType::I32).to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0}));  // truncates
  EXPECT_EQ(a.to(DType::Bool).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  Tensor big = Tensor::from<int64_t>({(int64_t{1} << 53) + 1, -5}, {2});
  // i64 -> i32 is exact (no detour through f64), wrapping like a static_cast.
  EXPECT_EQ(big.to(DType::I32).to_vector<int32_t>(), (std::vector<int32_t>{1, -5}));
  Tensor ids = Tensor::from<int32_t>({3, -1}, {2});
  EXPECT_EQ(ids.to(DType::F32).to_vector<float>(), (std::vector<float>{3.f, -1.f}));
}

TEST(Tensor, SameDtypeConversionSharesStorage) {
  Tensor a = Tensor::from<float>({1.f}, {1});
  EXPECT_EQ(a.to(DType::F32).raw(), a.raw());
}

TEST(Tensor, QuantConversionsThrow) {
  std::vector<uint8_t> block(18, 0);
  Tensor q = Tensor::from_bytes(DType::Q4_0, {32}, block.data(), block.size());
  EXPECT_EQ(q.nbytes(), 18u);
  EXPECT_THROW(q.to(DType::F32), InvalidArgument);
  EXPECT_THROW(Tensor::from<float>(std::vector<float>(32, 1.f), {32}).to(DType::Q4_0), InvalidArgument);
  EXPECT_THROW(q.to_f64(), Unsupported);
}

TEST(Tensor, FromBytesChecksSizeAndBlocks) {
  std::vector<uint8_t> bytes(36, 0);
  EXPECT_NO_THROW(Tensor::from_bytes(DType::Q4_0, {2, 32}, bytes.data(), 36));
  EXPECT_THROW(Tensor::from_bytes(DType::Q4_0, {2, 32}, bytes.data(), 35), InvalidArgument);
  EXPECT_THROW(Tensor::from_bytes(DType::Q4_0, {33}, bytes.data(), 36), ShapeError);
  float v = 1.5f;
  Tensor f = Tensor::from_bytes(DType::F32, {1}, &v, sizeof v);
  EXPECT_EQ(f.to_vector<float>()[0], 1.5f);
}

TEST(Tensor, ExternalViewsAreReadOnly) {
  auto storage = std::make_shared<std::vector<float>>(std::vector<float>{1.f, 2.f});
  Tensor v = Tensor::view_external(DType::F32, {2}, storage->data(), storage);
  EXPECT_EQ(v.raw(), storage->data());
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{1.f, 2.f}));
  EXPECT_THROW(v.raw_mut(), InvalidArgument);
  EXPECT_THROW(v.data<float>()[0] = 0.f, InvalidArgument);
  Tensor c = v.clone();
  c.data<float>()[0] = 5.f;
  EXPECT_EQ(storage->at(0), 1.f);
  EXPECT_THROW(Tensor::view_external(DType::Q4_K, {100}, storage->data(), storage), ShapeError);
}

}  // namespace
}  // namespace rlx
