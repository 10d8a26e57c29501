// One crafted malformed GGUF file per hazard, each built from a valid file by
// byte patching, each expected to fail with a FormatError naming the field
// (and usually its byte offset). The same files seed the fuzzer: set
// RLX_WRITE_FUZZ_CORPUS=<dir> (e.g. tests/fuzz/corpus/gguf) to regenerate them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "gguf_test_util.h"
#include "rlx/formats/gguf.h"

namespace rlx {
namespace {

using Bytes = std::vector<uint8_t>;

// A small valid file: a Q4_0 matrix, an F32 matrix and a few metadata entries.
Bytes valid_file() {
  GgufWriter w;
  w.set("general.architecture", GgufValue(std::string("test")));
  w.set_alignment(32);
  w.set("some.string", GgufValue(std::string("hello")));
  w.set("some.array", GgufValue(GgufArray{std::vector<int32_t>{1, 2, 3, 4}}));
  w.set("some.bool", GgufValue(true));
  w.add_tensor("a.weight", DType::Q4_0, {64, 2}, Bytes(4 * 18, 0x11));
  w.add_tensor("b.weight", DType::F32, {8, 4}, Bytes(32 * 4, 0x22));
  return w.to_bytes();
}

void put_u32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_u64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// Offset of the u64 length prefix of the GGUF string `s` (a key or tensor name).
size_t find_string(const Bytes& b, std::string_view s) {
  Bytes needle(8);
  const uint64_t n = s.size();
  std::memcpy(needle.data(), &n, 8);
  needle.insert(needle.end(), s.begin(), s.end());
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  if (it == b.end()) throw std::runtime_error("test bug: string not found");
  return static_cast<size_t>(it - b.begin());
}
// Metadata: offset of the value-type field of `key`; the value follows 4 bytes later.
size_t kv_type_at(const Bytes& b, std::string_view key) { return find_string(b, key) + 8 + key.size(); }
// Tensor info fields of `name` (n_dims is preserved by the patches below).
size_t ndims_at(const Bytes& b, std::string_view name) { return find_string(b, name) + 8 + name.size(); }
size_t ne_at(const Bytes& b, std::string_view name, int i) { return ndims_at(b, name) + 4 + 8 * i; }
size_t type_at(const Bytes& b, std::string_view name) { return ne_at(b, name, 2); }  // both tensors are 2-D
size_t offset_at(const Bytes& b, std::string_view name) { return type_at(b, name) + 4; }

struct Crafted {
  std::string name;
  Bytes bytes;
  std::vector<std::string> expect;  // substrings of the error message
};

std::vector<Crafted> crafted_files() {
  const Bytes base = valid_file();
  std::vector<Crafted> out;
  auto patched = [&](std::string name, std::function<void(Bytes&)> patch, std::vector<std::string> expect) {
    Bytes b = base;
    patch(b);
    out.push_back({std::move(name), std::move(b), std::move(expect)});
  };
  const std::string s = std::to_string(base.size());

  patched("truncated_header", [](Bytes& b) { b.resize(10); },
          {"header: field 'tensor_count' at byte 8 needs 8 bytes but only 2 remain"});
  patched("bad_magic", [](Bytes& b) { b[0] = 'X'; }, {"not a GGUF file"});
  patched("version_1", [](Bytes& b) { put_u32(b, 4, 1); }, {"GGUF version 1 is not supported"});
  patched("version_big_endian", [](Bytes& b) { put_u32(b, 4, 0x03000000); }, {"big-endian"});
  patched("huge_tensor_count", [](Bytes& b) { put_u64(b, 8, 1ull << 40); },
          {"'tensor_count' at byte 8 is 1099511627776"});
  patched("huge_kv_count", [](Bytes& b) { put_u64(b, 16, ~0ull); }, {"'metadata_kv_count' at byte 16"});
  patched("string_length_past_eof", [](Bytes& b) { put_u64(b, kv_type_at(b, "some.string") + 4, 1ull << 62); },
          {"metadata 'some.string': string length 4611686018427387904 at byte", "runs past end of file (size " + s});
  patched("key_length_past_eof", [](Bytes& b) { put_u64(b, find_string(b, "some.string"), 60000); },
          {"metadata entry #2 key (at byte", "string length 60000 at byte", "runs past end of file"});
  patched("key_length_over_limit", [](Bytes& b) { put_u64(b, find_string(b, "some.string"), ~0ull - 3); },
          {"metadata entry #2 key", "string length 18446744073709551612", "exceeds the limit 65535"});
  patched("array_count_huge", [](Bytes& b) { put_u64(b, kv_type_at(b, "some.array") + 8, 1ull << 61); },
          {"metadata 'some.array': array count 2305843009213693952 at byte", "bytes remain"});
  patched("unknown_value_type", [](Bytes& b) { put_u32(b, kv_type_at(b, "some.string"), 13); },
          {"metadata 'some.string': unknown value type 13 at byte"});
  patched("bool_not_0_or_1", [](Bytes& b) { b[kv_type_at(b, "some.bool") + 4] = 7; },
          {"metadata 'some.bool': bool at byte", "is 7, not 0 or 1"});
  {
    // A duplicate key: rename "some.string" (entry #2) to "some.bool" (entry #4).
    // The name is shorter, so the key is rebuilt in place.
    Bytes b = base;
    const size_t at = find_string(b, "some.string");
    Bytes entry(8);
    const uint64_t n = 9;
    std::memcpy(entry.data(), &n, 8);
    for (char c : std::string("some.bool")) entry.push_back(static_cast<uint8_t>(c));
    b.erase(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + 8 + 11));
    b.insert(b.begin() + static_cast<long>(at), entry.begin(), entry.end());
    out.push_back({"duplicate_key", b, {"duplicate metadata 'some.bool' at byte"}});
  }
  patched("alignment_wrong_type", [](Bytes& b) { put_u32(b, kv_type_at(b, "general.alignment"), 5); },
          {"metadata 'general.alignment' (value at byte", "is i32, must be u32"});
  patched("alignment_zero", [](Bytes& b) { put_u32(b, kv_type_at(b, "general.alignment") + 4, 0); },
          {"metadata 'general.alignment' (value at byte", "is 0, must be a nonzero power of two"});
  patched("alignment_not_pow2", [](Bytes& b) { put_u32(b, kv_type_at(b, "general.alignment") + 4, 48); },
          {"is 48, must be a nonzero power of two"});
  {
    GgufArray a{std::vector<int32_t>{1}};
    for (int i = 0; i < 9; ++i) a = GgufArray{std::vector<GgufArray>{a}};
    GgufWriter w;
    w.set("deep", GgufValue(a));
    out.push_back({"nested_array_depth", w.to_bytes(), {"metadata 'deep': arrays nested deeper than 8 at byte"}});
  }
  patched("tensor_data_past_eof", [](Bytes& b) { b.resize(b.size() - 64); },
          {"tensor 'b.weight' (info at byte", "offset 96 + 128 bytes (data section at byte",
           "runs past end of file (size " + std::to_string(base.size() - 64) + ")"});
  patched("ne_product_overflow", [](Bytes& b) {
    put_u64(b, ne_at(b, "b.weight", 0), 1ull << 32);
    put_u64(b, ne_at(b, "b.weight", 1), 1ull << 32);
  }, {"tensor 'b.weight' (info at byte", "element count of ne = [4294967296, 4294967296] overflows int64"});
  patched("nbytes_overflow", [](Bytes& b) {
    put_u64(b, ne_at(b, "b.weight", 0), 1ull << 31);
    put_u64(b, ne_at(b, "b.weight", 1), 1ull << 31);
  }, {"tensor 'b.weight'", "size of 4611686018427387904 f32 elements", "overflows 64 bits"});
  patched("offset_wraparound", [](Bytes& b) { put_u64(b, offset_at(b, "b.weight"), ~0ull - 31); },
          {"tensor 'b.weight'", "offset 18446744073709551584 + 128 bytes", "runs past end of file"});
  patched("offset_misaligned", [](Bytes& b) { put_u64(b, offset_at(b, "b.weight"), 16); },
          {"tensor 'b.weight'", "offset 16 at byte", "is not a multiple of the alignment 32"});
  patched("duplicate_tensor_name", [](Bytes& b) { b[find_string(b, "b.weight") + 8] = 'a'; },
          {"tensor 'a.weight' (info at byte", "duplicate tensor name"});
  patched("ne0_not_block_multiple", [](Bytes& b) { put_u64(b, ne_at(b, "a.weight", 0), 48); },
          {"tensor 'a.weight'", "ne[0] = 48 is not a multiple of the q4_0 block size 32"});
  patched("unknown_type_id", [](Bytes& b) { put_u32(b, type_at(b, "a.weight"), 99); },
          {"tensor 'a.weight'", "unknown ggml type id 99 at byte"});
  patched("unsupported_type_id", [](Bytes& b) { put_u32(b, type_at(b, "a.weight"), 31); },
          {"ggml type 31 (q4_0_4_4)", "is not supported by rlx"});
  patched("n_dims_too_large", [](Bytes& b) { put_u32(b, ndims_at(b, "a.weight"), 5); },
          {"tensor 'a.weight'", "n_dims 5 at byte", "exceeds 4"});
  patched("zero_dim", [](Bytes& b) { put_u64(b, ne_at(b, "b.weight", 1), 0); }, {"tensor 'b.weight'", "ne[1] is 0"});
  patched("huge_dim", [](Bytes& b) { put_u64(b, ne_at(b, "b.weight", 1), ~0ull); },
          {"tensor 'b.weight'", "ne[1] = 18446744073709551615 exceeds int64"});
  patched("tensor_name_too_long", [](Bytes& b) { put_u64(b, find_string(b, "a.weight"), 5000); },
          {"tensor #0 name", "string length 5000", "exceeds the limit 1024"});
  return out;
}

class MalformedGguf : public ::testing::TestWithParam<size_t> {};

TEST(MalformedGgufSet, EveryHazardIsCovered) { EXPECT_GE(crafted_files().size(), 25u); }

TEST(MalformedGgufSet, BaseFileIsValid) {
  const Bytes b = valid_file();
  const GgufFile f = GgufFile::from_memory(b.data(), b.size(), nullptr, "crafted.gguf");
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST_P(MalformedGguf, FailsWithFieldNamed) {
  const Crafted c = crafted_files()[GetParam()];
  SCOPED_TRACE(c.name);
  try {
    GgufFile::from_memory(c.bytes.data(), c.bytes.size(), nullptr, "crafted.gguf");
    FAIL() << c.name << " was accepted";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("crafted.gguf: ", 0), 0u) << msg;
    for (const auto& part : c.expect) {
      EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Hazards, MalformedGguf, ::testing::Range<size_t>(0, crafted_files().size()),
                         [](const auto& info) { return crafted_files()[info.param].name; });

TEST(MalformedGgufSet, OpenNamesThePath) {
  test::TempDir dir;
  const std::string path = dir.file("model.gguf");
  Bytes b = valid_file();
  b.resize(b.size() - 64);
  test::write_file(path, b);
  try {
    GgufFile::open(path);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": tensor 'b.weight' (info at byte ", 0), 0u) << e.what();
  }
}

// A valid seed that reaches the nested-array, string-array and block-format paths.
Bytes rich_file() {
  GgufWriter w;
  w.set("tokens", GgufValue(GgufArray{std::vector<std::string>{"<s>", "a", "bc"}}));
  w.set("nested", GgufValue(GgufArray{std::vector<GgufArray>{GgufArray{std::vector<float>{1.5f}}}}));
  w.set("flags", GgufValue(GgufArray{std::vector<bool>{true, false}}));
  w.set("big", GgufValue(uint64_t{1} << 40));
  uint8_t seed = 1;
  for (DType t : {DType::Q4_K, DType::IQ2_XXS, DType::IQ1_M, DType::TQ1_0, DType::NVFP4, DType::BF16}) {
    const int64_t n = std::max<int64_t>(256, dtype_info(t).block_elems);
    Bytes data(static_cast<size_t>(dtype_bytes(t, n)));
    for (auto& x : data) x = seed = static_cast<uint8_t>(seed * 37 + 11);
    w.add_tensor(std::string(dtype_name(t)) + ".w", t, {n}, data);
  }
  return w.to_bytes();
}

TEST(MalformedGgufSet, RichSeedIsValid) {
  const Bytes b = rich_file();
  EXPECT_EQ(GgufFile::from_memory(b.data(), b.size(), nullptr).tensors().size(), 6u);
}

TEST(MalformedGgufSet, WriteFuzzCorpus) {
  const char* dir = std::getenv("RLX_WRITE_FUZZ_CORPUS");
  if (!dir || !*dir) GTEST_SKIP() << "set RLX_WRITE_FUZZ_CORPUS=<dir> to write the crafted files as a fuzz corpus";
  test::write_file(std::string(dir) + "/valid.gguf", valid_file());
  test::write_file(std::string(dir) + "/valid_rich.gguf", rich_file());
  for (const auto& c : crafted_files()) test::write_file(std::string(dir) + "/" + c.name + ".gguf", c.bytes);
}

}  // namespace
}  // namespace rlx
