// CPU dequantization against the python gguf package (bit-exact: the same
// formulas in the same f32 order of operations, no tolerance), quantizers
// against the package's quantizers (byte-exact) and by round-trip error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "gguf_test_util.h"
#include "rlx/core/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

namespace rlx {
namespace {

// Index of the first element whose bits differ, or -1. NaN never appears in the
// fixtures, so bitwise equality is value equality (and also tells -0 from +0).
int64_t first_mismatch(const float* got, const float* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) return i;
  return -1;
}

class PythonFixtures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::python_has_gguf()) return;
    dir_ = new test::TempDir();
    generated_ = test::run_fixture_script(test::quoted(dir_->path().string())).status == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    RLX_REQUIRE_PYTHON_GGUF();
    ASSERT_TRUE(generated_) << "gen_gguf_fixtures.py failed";
  }
  static GgufFile open(const char* name) { return GgufFile::open(dir_->file(name)); }

  static inline test::TempDir* dir_ = nullptr;
  static inline bool generated_ = false;
};

TEST_F(PythonFixtures, DequantizationIsBitExact) {
  const GgufFile f = open("dequant.gguf");
  std::set<DType> covered;
  for (const std::string& name : f.get_array<std::string>("fixture.types")) {
    SCOPED_TRACE(name);
    const GgufTensorInfo& q = f.tensor(name + ".q");
    const GgufTensorInfo& ref = f.tensor(name + ".ref");
    ASSERT_EQ(dtype_from_name(name), q.type);
    ASSERT_EQ(ref.type, DType::F32);
    ASSERT_EQ(q.ne, ref.ne);
    ASSERT_TRUE(has_cpu_dequant(q.type));
    std::vector<float> got(static_cast<size_t>(q.numel()));
    dequantize_row(q.type, q.data, got.data(), q.numel());
    const auto* want = reinterpret_cast<const float*>(ref.data);
    const int64_t bad = first_mismatch(got.data(), want, q.numel());
    EXPECT_EQ(bad, -1) << "element " << bad << ": got " << got[bad] << ", python " << want[bad];
    covered.insert(q.type);
  }
  // Python has no dequantizer for Q8_1, Q8_K and Q1_0 (tested by hand below);
  // every other format must be here.
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto d = static_cast<DType>(i);
    if (is_quant(d) && d != DType::Q8_1 && d != DType::Q8_K && d != DType::Q1_0) {
      EXPECT_TRUE(covered.count(d)) << dtype_name(d) << " has no python fixture";
    }
  }
}

TEST_F(PythonFixtures, QuantizersMatchPythonBytes) {
  const GgufFile f = open("quantize.gguf");
  int compared = 0;
  for (const std::string& name : f.get_array<std::string>("fixture.types")) {
    SCOPED_TRACE(name);
    const GgufTensorInfo& src = f.tensor(name + ".src");
    const GgufTensorInfo& pyq = f.tensor(name + ".pyq");
    const GgufTensorInfo& pyq_ref = f.tensor(name + ".pyq_ref");
    const int64_t n = src.numel();
    std::vector<float> deq(static_cast<size_t>(n));
    dequantize_row(pyq.type, pyq.data, deq.data(), n);
    const int64_t bad = first_mismatch(deq.data(), reinterpret_cast<const float*>(pyq_ref.data), n);
    EXPECT_EQ(bad, -1) << "dequantization of python's quants differs at element " << bad;
    if (!has_cpu_quantize(pyq.type)) continue;
    std::vector<uint8_t> ours(pyq.nbytes);
    quantize_row(pyq.type, reinterpret_cast<const float*>(src.data), ours.data(), n);
    EXPECT_EQ(std::memcmp(ours.data(), pyq.data, pyq.nbytes), 0) << "quantized bytes differ from python's";
    ++compared;
  }
  EXPECT_GE(compared, 6);  // bf16, q4_0, q4_1, q5_0, q5_1, q8_0
}

TEST(Dequant, Q8KAndQ81ByHand) {
  // Q8_K: f32 d, 256 int8, 16 int16 sums (ignored by dequantization).
  std::vector<uint8_t> k(292, 0);
  const float d = -0.0625f;
  std::memcpy(k.data(), &d, 4);
  for (int j = 0; j < 256; ++j) k[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 128));
  std::vector<float> y(256);
  dequantize_row(DType::Q8_K, k.data(), y.data(), 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], d * static_cast<float>(j - 128));
  // Q8_1: f16 d, f16 s (a dot-product helper), 32 int8.
  std::vector<uint8_t> b(36, 0);
  const uint16_t dh = f32_to_f16(0.5f), sh = f32_to_f16(123.0f);
  std::memcpy(b.data(), &dh, 2);
  std::memcpy(b.data() + 2, &sh, 2);
  for (int j = 0; j < 32; ++j) b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(3 * j - 50));
  std::vector<float> z(32);
  dequantize_row(DType::Q8_1, b.data(), z.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(z[j], 0.5f * static_cast<float>(3 * j - 50));
}

// Q1_0 (gguf's type 41: 128 elements in 18 bytes, f16 d then 16 bytes of
// bits): element j is +d when bit j % 8 of byte j / 8 is set (LSB first),
// −d otherwise. Python's gguf package knows the layout but has no
// dequantizer, so the expectations are written out by hand.
TEST(Dequant, Q10ByHand) {
  std::vector<uint8_t> b(2 * 18, 0);
  const uint16_t d0 = f32_to_f16(0.75f), d1 = f32_to_f16(-2.0f);
  std::memcpy(b.data(), &d0, 2);
  std::memcpy(b.data() + 18, &d1, 2);
  b[2] = 0x01;   // element 0
  b[3] = 0x80;   // element 15
  b[4] = 0xFF;   // elements 16..23
  b[17] = 0x40;  // element 126
  b[18 + 2 + 15] = 0x80;  // block 1, element 127
  std::vector<float> y(256);
  dequantize_row(DType::Q1_0, b.data(), y.data(), 256);
  for (int j = 0; j < 128; ++j) {
    const bool set = j == 0 || j == 15 || (j >= 16 && j < 24) || j == 126;
    EXPECT_EQ(y[j], set ? 0.75f : -0.75f) << "element " << j;
    EXPECT_EQ(y[128 + j], j == 127 ? -2.0f : 2.0f) << "block 1, element " << j;
  }
  EXPECT_THROW(dequantize_row(DType::Q1_0, b.data(), y.data(), 64), InvalidArgument);
}

// The Q1_0 quantizer keeps each element's sign (0 counts as positive) and
// sets d to the f16 of mean |x|, the scale that minimizes the squared error
// for sign quantization.
TEST(Quantize, Q10KeepsSignsWithMeanAbsScale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> x(384);
  for (float& v : x) v = normal(rng);
  x[5] = 0.0f;
  std::vector<uint8_t> q(3 * 18);
  quantize_row(DType::Q1_0, x.data(), q.data(), 384);
  std::vector<float> y(384);
  dequantize_row(DType::Q1_0, q.data(), y.data(), 384);
  for (int blk = 0; blk < 3; ++blk) {
    double mean_abs = 0.0;
    for (int j = 0; j < 128; ++j) mean_abs += std::fabs(x[128 * blk + j]) / 128.0;
    const float d = std::fabs(y[128 * blk]);
    EXPECT_NEAR(d, mean_abs, mean_abs / 1024.0) << "block " << blk;  // f16 rounding
    EXPECT_EQ(d, f16_to_f32(f32_to_f16(d))) << "d is an f16";
    for (int j = 0; j < 128; ++j) {
      const int i = 128 * blk + j;
      EXPECT_EQ(y[i], x[i] >= 0.0f ? d : -d) << "element " << i;
    }
  }
  EXPECT_TRUE(has_cpu_quantize(DType::Q1_0));
}

TEST(Dequant, ScalarTypes) {
  const Tensor i64 = Tensor::from(std::vector<int64_t>{-3, 1ll << 40}, {2});
  EXPECT_EQ(dequantize(i64).to_vector<float>(), (std::vector<float>{-3.0f, 1099511627776.0f}));
  const Tensor f64 = Tensor::from(std::vector<double>{0.1, -2.0}, {2});
  EXPECT_EQ(dequantize(f64).to_vector<float>(), (std::vector<float>{0.1f, -2.0f}));
  const Tensor i8 = Tensor::from(std::vector<int8_t>{-128, 127}, {1, 2});
  const Tensor y = dequantize(i8);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-128.0f, 127.0f}));
  const uint8_t fp8[2] = {0x7e, 0x38};  // e4m3: 448, 1.0
  float out[2];
  dequantize_row(DType::F8E4M3, fp8, out, 2);
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_EQ(out[1], 1.0f);
}

TEST(Dequant, CoversEveryTypeButComplex) {
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_EQ(has_cpu_dequant(d), d != DType::C64) << dtype_name(d);
  }
  float y[32];
  uint8_t block[18] = {};
  EXPECT_THROW(dequantize_row(DType::Q4_0, block, y, 16), InvalidArgument);
  EXPECT_THROW(dequantize_row(DType::C64, block, y, 1), Unsupported);
  EXPECT_THROW(quantize_row(DType::IQ2_XXS, y, block, 256), Unsupported);
}

std::vector<float> normal_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Round trip on N(0, 1) data: the bounds are ~1.3x the RMS errors measured
// with this seed (f16 2.1e-4, bf16 1.6e-3, q8_0 5.2e-3, q5_0 0.041, q5_1 0.036,
// q4_0 0.083, q4_1 0.076, q4_k 0.075, q6_k 0.018), so a packing bug fails loudly.
TEST(Quantize, RoundTripError) {
  const struct {
    DType type;
    double max_rms;
  } cases[] = {
      {DType::F32, 0.0},    {DType::F16, 3e-4},   {DType::BF16, 2.2e-3}, {DType::Q8_0, 7e-3},
      {DType::Q5_0, 0.055}, {DType::Q5_1, 0.05},  {DType::Q4_0, 0.11},   {DType::Q4_1, 0.1},
      {DType::Q4_K, 0.1},   {DType::Q6_K, 0.025},
  };
  const int64_t n = 8 * 256;
  const std::vector<float> x = normal_data(n, 7);
  for (const auto& c : cases) {
    SCOPED_TRACE(dtype_name(c.type));
    ASSERT_TRUE(has_cpu_quantize(c.type));
    std::vector<uint8_t> q(static_cast<size_t>(dtype_bytes(c.type, n)));
    quantize_row(c.type, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(c.type, q.data(), y.data(), n);
    double se = 0;
    for (int64_t i = 0; i < n; ++i) se += (y[i] - x[i]) * (y[i] - x[i]);
    const double rms = std::sqrt(se / static_cast<double>(n));
    EXPECT_LE(rms, c.max_rms) << "rms error " << rms;
  }
}

TEST(Quantize, ZerosAndConstantsStayExact) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<float> zeros(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_bytes(t, 256)));
    quantize_row(t, zeros.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

TEST(Quantize, TensorApi) {
  const Tensor x = Tensor::from(normal_data(2 * 256, 3), {2, 256});
  const Tensor q = quantize(x, DType::Q6_K);
  EXPECT_EQ(q.dtype(), DType::Q6_K);
  EXPECT_EQ(q.shape(), x.shape());
  EXPECT_EQ(q.nbytes(), 2u * 210u);
  const Tensor y = dequantize(q);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_NEAR(y.to_vector<float>()[5], x.to_vector<float>()[5], 0.1);
  EXPECT_THROW(quantize(Tensor::from(normal_data(64, 1), {2, 32}), DType::Q4_K), ShapeError);
  EXPECT_THROW(quantize(Tensor::from(std::vector<int32_t>{1}, {1}), DType::Q4_0), InvalidArgument);
}

// Q4_0 and Q5_0 rows become Q8_0 rows that dequantize to the same floats bit
// for bit: random blocks (every code and high bit), finite f16 scales.
TEST(ConvertToQ8_0, ExactForTheLegacySymmetricTypes) {
  std::mt19937_64 rng(11);
  const int64_t n = 64 * 32;
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(t));
    ASSERT_TRUE(converts_to_q8_0(t));
    const int bytes = static_cast<int>(dtype_bytes(t, 32));
    std::vector<uint8_t> src(static_cast<size_t>(dtype_bytes(t, n)));
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < src.size(); at += static_cast<size_t>(bytes)) {  // d: a finite f16 of either sign
      const uint16_t d = f32_to_f16(std::ldexp(static_cast<float>(rng() % 1000 + 1), -static_cast<int>(rng() % 20)) *
                                    (rng() % 2 ? -1.0f : 1.0f));
      std::memcpy(&src[at], &d, 2);
    }
    std::vector<uint8_t> q8(static_cast<size_t>(dtype_bytes(DType::Q8_0, n)));
    convert_to_q8_0(t, src.data(), q8.data(), n);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    dequantize_row(t, src.data(), want.data(), n);
    dequantize_row(DType::Q8_0, q8.data(), got.data(), n);
    EXPECT_EQ(first_mismatch(got.data(), want.data(), n), -1);
  }
  for (DType t : {DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::F16}) {
    EXPECT_FALSE(converts_to_q8_0(t)) << dtype_name(t);
    std::vector<uint8_t> buf(1024);
    EXPECT_THROW(convert_to_q8_0(t, buf.data(), buf.data(), 32), Unsupported) << dtype_name(t);
  }
  std::vector<uint8_t> buf(1024);
  EXPECT_THROW(convert_to_q8_0(DType::Q5_0, buf.data(), buf.data(), 33), Error);  // not whole blocks
}

}  // namespace
}  // namespace rlx
