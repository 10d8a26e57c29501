// GGUF reader/writer round trips, typed metadata access, tensor views, the
// ggml type-id table, and interop with the python gguf package's reader.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <numeric>

#include "gguf_test_util.h"
#include "rlx/formats/ggml_types.h"
#include "rlx/formats/gguf.h"

namespace rlx {
namespace {

using test::TempDir;

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 0) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

GgufArray nested_array() {
  GgufArray inner1{std::vector<int32_t>{1, -2, 3}};
  GgufArray inner2{std::vector<int32_t>{40, 50}};
  return GgufArray{std::vector<GgufArray>{inner1, inner2}};
}

// One metadata entry of every scalar type and arrays of every element type.
std::vector<std::pair<std::string, GgufValue>> all_metadata() {
  return {
      {"t.u8", GgufValue(uint8_t{200})},
      {"t.i8", GgufValue(int8_t{-100})},
      {"t.u16", GgufValue(uint16_t{60000})},
      {"t.i16", GgufValue(int16_t{-30000})},
      {"t.u32", GgufValue(uint32_t{4000000000u})},
      {"t.i32", GgufValue(int32_t{-2000000000})},
      {"t.f32", GgufValue(1.5f)},
      {"t.bool", GgufValue(true)},
      {"t.string", GgufValue(std::string("h\xc3\xa9llo, gguf"))},
      {"t.u64", GgufValue(uint64_t{(1ull << 63) + 5})},
      {"t.i64", GgufValue(int64_t{-(1ll << 62)})},
      {"t.f64", GgufValue(3.141592653589793)},
      {"a.u8", GgufValue(GgufArray{std::vector<uint8_t>{0, 1, 255}})},
      {"a.i8", GgufValue(GgufArray{std::vector<int8_t>{-128, 0, 127}})},
      {"a.u16", GgufValue(GgufArray{std::vector<uint16_t>{1, 65535}})},
      {"a.i16", GgufValue(GgufArray{std::vector<int16_t>{-32768, 32767}})},
      {"a.u32", GgufValue(GgufArray{std::vector<uint32_t>{7, 4294967295u}})},
      {"a.i32", GgufValue(GgufArray{std::vector<int32_t>{-1, 2, -3}})},
      {"a.f32", GgufValue(GgufArray{std::vector<float>{0.25f, -1e-3f, 1e30f}})},
      {"a.bool", GgufValue(GgufArray{std::vector<bool>{true, false, true}})},
      {"a.string", GgufValue(GgufArray{std::vector<std::string>{"<s>", "", "\xe2\x96\x81the"}})},
      {"a.u64", GgufValue(GgufArray{std::vector<uint64_t>{0, ~0ull}})},
      {"a.i64", GgufValue(GgufArray{std::vector<int64_t>{-5, 1ll << 40}})},
      {"a.f64", GgufValue(GgufArray{std::vector<double>{1e-300, -2.5}})},
      {"a.nested", GgufValue(nested_array())},
  };
}

struct TensorSpec {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
};

const std::vector<TensorSpec>& tensor_specs() {
  static const std::vector<TensorSpec> specs = {
      {"f32.matrix", DType::F32, {4, 3}},       {"f16.vector", DType::F16, {8}},
      {"q4_0.weight", DType::Q4_0, {64, 2}},    {"q4_k.weight", DType::Q4_K, {256, 1, 2}},
      {"i32.ids", DType::I32, {5}},             {"bf16.4d", DType::BF16, {4, 2, 2, 2}},
      {"iq2_xxs.weight", DType::IQ2_XXS, {256}}, {"nvfp4.weight", DType::NVFP4, {128}},
      {"q1_0.weight", DType::Q1_0, {128, 3}},
  };
  return specs;
}

GgufWriter make_writer() {
  GgufWriter w;
  for (auto& [k, v] : all_metadata()) w.set(k, v);
  uint8_t seed = 0;
  for (const auto& s : tensor_specs()) {
    const auto bytes = static_cast<size_t>(dtype_bytes(s.type, shape_numel(s.ne)));
    w.add_tensor(s.name, s.type, s.ne, iota_bytes(bytes, seed += 17));
  }
  return w;
}

TEST(GgmlTypes, IdsMatchGgml) {
  EXPECT_EQ(ggml_type_id(DType::F32), 0u);
  EXPECT_EQ(ggml_type_id(DType::Q4_0), 2u);
  EXPECT_EQ(ggml_type_id(DType::Q5_0), 6u);
  EXPECT_EQ(ggml_type_id(DType::Q2_K), 10u);
  EXPECT_EQ(ggml_type_id(DType::IQ4_XS), 23u);
  EXPECT_EQ(ggml_type_id(DType::I8), 24u);
  EXPECT_EQ(ggml_type_id(DType::F64), 28u);
  EXPECT_EQ(ggml_type_id(DType::IQ1_M), 29u);
  EXPECT_EQ(ggml_type_id(DType::BF16), 30u);
  EXPECT_EQ(ggml_type_id(DType::TQ1_0), 34u);
  EXPECT_EQ(ggml_type_id(DType::TQ2_0), 35u);
  EXPECT_EQ(ggml_type_id(DType::MXFP4), 39u);
  EXPECT_EQ(ggml_type_id(DType::NVFP4), 40u);
  EXPECT_EQ(ggml_type_id(DType::Q1_0), 41u);
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto d = static_cast<DType>(i);
    if (auto id = ggml_type_of(d)) {
      EXPECT_EQ(dtype_from_ggml(*id), d);
      EXPECT_EQ(ggml_type_name(*id), dtype_name(d));
    }
  }
  EXPECT_THROW(ggml_type_id(DType::U8), Unsupported);
}

TEST(GgmlTypes, UnknownIdsAreFormatErrors) {
  try {
    dtype_from_ggml(99);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_STREQ(e.what(), "unknown ggml type id 99");
  }
  try {
    dtype_from_ggml(31);  // q4_0_4_4, a repacked layout removed from GGUF
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_STREQ(e.what(), "ggml type 31 (q4_0_4_4) is not supported by rlx");
  }
  EXPECT_THROW(dtype_from_ggml(4), FormatError);
}

TEST(Gguf, RoundTripsEveryMetadataType) {
  const auto bytes = make_writer().to_bytes();
  const GgufFile f = GgufFile::from_memory(bytes.data(), bytes.size(), nullptr, "mem.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  const auto expected = all_metadata();
  ASSERT_EQ(f.metadata().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, expected[i].first);
    EXPECT_TRUE(f.metadata()[i].second == expected[i].second) << expected[i].first << ": "
                                                               << gguf_value_str(f.metadata()[i].second);
  }
  EXPECT_EQ(f.get<uint32_t>("t.u32"), 4000000000u);
  EXPECT_EQ(f.get<std::string>("t.string"), "h\xc3\xa9llo, gguf");
  EXPECT_EQ(f.get_array<std::string>("a.string")[2], "\xe2\x96\x81the");
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000);
  EXPECT_DOUBLE_EQ(f.get_float("t.f32"), 1.5);
  EXPECT_EQ(f.get_or<uint32_t>("t.absent", 7u), 7u);
  EXPECT_EQ(gguf_value_str(*f.find("a.i32")), "[i32 × 3: -1, 2, -3]");
}

TEST(Gguf, TypedAccessErrorsNameTheKey) {
  const auto bytes = make_writer().to_bytes();
  const GgufFile f = GgufFile::from_memory(bytes.data(), bytes.size(), nullptr, "mem.gguf");
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no FormatError");
  };
  EXPECT_EQ(message([&] { f.get<uint32_t>("t.string"); }), "mem.gguf: metadata 't.string' is string, expected u32");
  EXPECT_EQ(message([&] { f.get<float>("missing.key"); }), "mem.gguf: missing metadata 'missing.key'");
  EXPECT_EQ(message([&] { f.get_array<int32_t>("a.string"); }),
            "mem.gguf: metadata 'a.string' is an array of string, expected an array of i32");
  EXPECT_EQ(message([&] { f.get_int("t.u64"); }),
            "mem.gguf: metadata 't.u64' = 9223372036854775813 does not fit int64");
  EXPECT_EQ(message([&] { f.get_int("t.f32"); }), "mem.gguf: metadata 't.f32' is f32, expected an integer");
  EXPECT_THROW(f.tensor("no.such.tensor"), InvalidArgument);
}

TEST(Gguf, RoundTripsTensorsAndViews) {
  TempDir dir;
  const std::string path = dir.file("t.gguf");
  make_writer().write(path);
  const GgufFile f = GgufFile::open(path);
  ASSERT_EQ(f.tensors().size(), tensor_specs().size());
  uint8_t seed = 0;
  for (size_t i = 0; i < tensor_specs().size(); ++i) {
    const auto& spec = tensor_specs()[i];
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, spec.name);
    EXPECT_EQ(t.type, spec.type);
    EXPECT_EQ(t.ne, spec.ne);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_GE(t.offset, f.data_offset());
    const auto expected = iota_bytes(static_cast<size_t>(dtype_bytes(spec.type, shape_numel(spec.ne))), seed += 17);
    ASSERT_EQ(t.nbytes, expected.size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), expected);
    EXPECT_EQ(&f.tensor(spec.name), &t);
  }
  // The view outlives the GgufFile: it holds the mapping.
  Tensor v;
  {
    const GgufFile g = GgufFile::open(path);
    v = g.view("f32.matrix");
  }
  EXPECT_EQ(v.shape(), (std::vector<int64_t>{3, 4}));  // ne reversed: rows of ne[0]
  EXPECT_EQ(v.dtype(), DType::F32);
  EXPECT_EQ(v.nbytes(), 48u);
  EXPECT_EQ(static_cast<const uint8_t*>(v.raw())[0], 17);
  EXPECT_THROW(v.raw_mut(), InvalidArgument);  // views of the mapping are read-only
}

TEST(Gguf, CustomAlignmentAndTensorFromRlxTensor) {
  GgufWriter w(2);
  w.set_alignment(64);
  Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  w.add_tensor("a", t);
  w.add_tensor("b", Tensor::from(std::vector<int32_t>{7}, {1}));
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::from_memory(bytes.data(), bytes.size(), nullptr);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get<uint32_t>("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor("a").ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(f.tensor("b").offset - f.tensor("a").offset, 64u);
  EXPECT_EQ(f.view("a").to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(bytes.size() % 64, 0u);
}

TEST(Gguf, WriterRejectsBadInput) {
  GgufWriter w;
  EXPECT_THROW(w.set("general.alignment", GgufValue(int32_t{32})), InvalidArgument);
  EXPECT_THROW(w.set_alignment(48), InvalidArgument);
  EXPECT_THROW(w.set_alignment(0), InvalidArgument);
  std::vector<uint8_t> block(18);
  w.add_tensor("x", DType::Q4_0, {32}, block);
  EXPECT_THROW(w.add_tensor("x", DType::Q4_0, {32}, block), InvalidArgument);          // duplicate
  EXPECT_THROW(w.add_tensor("y", DType::Q4_0, {16, 2}, block), InvalidArgument);       // ne[0] % 32
  EXPECT_THROW(w.add_tensor("z", DType::Q4_0, {64}, block), InvalidArgument);          // size
  EXPECT_THROW(w.add_tensor("w", DType::Q4_0, {32, 1, 1, 1, 1}, block), InvalidArgument);  // 5 dims
  EXPECT_THROW(w.add_tensor("u", DType::U8, {18}, block), Unsupported);
}

TEST(Gguf, ScalarTensorHasEmptyNe) {
  GgufWriter w;
  w.add_tensor("s", Tensor::from(std::vector<float>{2.5f}, {}));
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::from_memory(bytes.data(), bytes.size(), nullptr);
  EXPECT_TRUE(f.tensor("s").ne.empty());
  EXPECT_EQ(f.view("s").to_vector<float>(), std::vector<float>{2.5f});
}

// Compares one metadata value with what python's GGUFReader reported for it
// (its `contents()` flattens nested arrays).
void flatten(const GgufValue& v, nlohmann::json& out) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          std::visit([&](const auto& items) {
            for (const auto& item : items) flatten(GgufValue(item), out);
          }, x.items);
        } else {
          out.push_back(x);
        }
      },
      v);
}

TEST(Gguf, PythonReaderReadsOurFile) {
  RLX_REQUIRE_PYTHON_GGUF();
  TempDir dir;
  const std::string path = dir.file("ours.gguf");
  GgufWriter w = make_writer();
  w.set_alignment(64);
  w.write(path);
  const auto r = test::run_fixture_script("--describe " + test::quoted(path) + " --data");
  ASSERT_EQ(r.status, 0);
  const auto j = nlohmann::json::parse(r.out);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["alignment"], 64);
  EXPECT_EQ(j["data_offset"], f.data_offset());
  ASSERT_EQ(j["metadata"].size(), f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    const auto& [key, value] = f.metadata()[i];
    const auto& m = j["metadata"][i];
    EXPECT_EQ(m["key"], key);
    EXPECT_EQ(m["types"][0], static_cast<int>(gguf_type_of(value))) << key;
    nlohmann::json ours = nlohmann::json::array();
    flatten(value, ours);
    const nlohmann::json theirs = m["value"].is_array() ? m["value"] : nlohmann::json::array({m["value"]});
    ASSERT_EQ(theirs.size(), ours.size()) << key;
    for (size_t k = 0; k < ours.size(); ++k) {
      if (ours[k].is_number_float()) {
        EXPECT_EQ(theirs[k].get<double>(), ours[k].get<double>()) << key << "[" << k << "]";
      } else {
        EXPECT_EQ(theirs[k], ours[k]) << key << "[" << k << "]";
      }
    }
  }
  ASSERT_EQ(j["tensors"].size(), f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    const auto& jt = j["tensors"][i];
    EXPECT_EQ(jt["name"], t.name);
    EXPECT_EQ(jt["type"], ggml_type_id(t.type));
    EXPECT_EQ(jt["ne"].get<std::vector<int64_t>>(), t.ne);
    EXPECT_EQ(jt["offset"], t.offset);
    EXPECT_EQ(jt["nbytes"], t.nbytes);
    std::string hex;
    static const char* digits = "0123456789abcdef";
    for (uint64_t k = 0; k < t.nbytes; ++k) {
      hex += digits[t.data[k] >> 4];
      hex += digits[t.data[k] & 15];
    }
    EXPECT_EQ(jt["hex"], hex) << t.name;
  }
}

}  // namespace
}  // namespace rlx
