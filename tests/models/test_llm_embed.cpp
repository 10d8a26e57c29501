// Sentence embeddings from decoder LLM GGUF files (llm::LlmEmbedder): the
// last-token, mean and first-token poolings of tiny random-weight models
// against the float64 reference's final-normed hidden states, sequences
// across the 32-token padding step, and the errors for files that are not
// embedding models.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "rlx/models/llm/embedder.h"
#include "tests/models/tiny_llm.h"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("rlx_test_llm_embed_" + std::to_string(::getpid()) + "_" + name)).string();
}

// The tiny model of `arch`, rewritten with extra metadata (e.g. a pooling type).
test::TinyModel write_with(const std::string& arch, const std::string& path,
                           const std::vector<std::pair<std::string, GgufValue>>& extra) {
  const std::string raw = path + ".raw";
  test::TinyModel m = test::write_tiny_gguf(test::tiny_spec(arch), raw, 5);
  const GgufFile base = GgufFile::open(raw);
  GgufWriter w;
  for (const auto& [k, v] : base.metadata()) w.set(k, v);
  for (const auto& [k, v] : extra) w.set(k, v);
  for (const auto& t : base.tensors()) w.add_tensor(t.name, base.view(t));
  w.write(path);
  fs::remove(raw);
  return m;
}

std::vector<double> pooled(const std::vector<std::vector<double>>& h, llm::Pooling p) {
  std::vector<double> v(h[0].size(), 0.0);
  const size_t first = p == llm::Pooling::Last ? h.size() - 1 : 0;
  const size_t last = p == llm::Pooling::Mean ? h.size() - 1 : first;
  for (size_t i = first; i <= last; ++i)
    for (size_t j = 0; j < v.size(); ++j) v[j] += h[i][j];
  double ss = 0;
  for (double x : v) ss += x * x;
  for (double& x : v) x /= std::sqrt(ss);
  return v;
}

struct Case {
  std::string arch;  // a tiny_spec variant
  int pooling_type;  // llama.cpp's: 1 mean, 2 cls, 3 last
};

class LlmEmbed : public ::testing::TestWithParam<Case> {};

TEST_P(LlmEmbed, PooledHiddenStatesMatchFloat64Reference) {
  const Case c = GetParam();
  const std::string path = temp_path(c.arch + ".gguf");
  const std::string key = test::tiny_spec(c.arch).arch + ".pooling_type";  // the variant's architecture
  const test::TinyModel model = write_with(c.arch, path, {{key, GgufValue(static_cast<uint32_t>(c.pooling_type))}});
  bert::EmbedOptions o;
  o.device = "cpu";
  o.max_length = 64;
  llm::LlmEmbedder e(path, o);
  EXPECT_EQ(static_cast<int>(e.pooling()), c.pooling_type);
  EXPECT_EQ(e.dim(), model.spec.hidden);
  // 3, 17, 32 (exactly one step), 33 and 64 (the maximum) tokens.
  std::vector<std::vector<int32_t>> ids;
  for (int n : {3, 17, 32, 33, 64}) {
    std::vector<int32_t> seq;
    for (int i = 0; i < n; ++i) seq.push_back(static_cast<int32_t>((i * 37 + n) % model.spec.vocab));
    ids.push_back(seq);
  }
  const Tensor got = e.embed_ids(ids);
  ASSERT_EQ(got.shape(), (std::vector<int64_t>{5, model.spec.hidden}));
  for (size_t r = 0; r < ids.size(); ++r) {
    const std::vector<double> want =
        pooled(test::reference_hidden(model, ids[r]), static_cast<llm::Pooling>(c.pooling_type));
    double worst = 0;
    for (size_t j = 0; j < want.size(); ++j)
      worst = std::max(worst, std::abs(got.data<float>()[r * want.size() + j] - want[j]));
    EXPECT_LT(worst, 2e-5) << c.arch << ", " << ids[r].size() << " tokens: the unit vectors differ by " << worst;
  }
  EXPECT_EQ(e.last_stats().tokens, 3u + 17 + 32 + 33 + 64);
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Archs, LlmEmbed,
                         ::testing::Values(Case{"qwen3", 3}, Case{"qwen3", 1}, Case{"gemma3", 3}, Case{"llama", 2},
                                           Case{"phi3_short", 3}),
                         [](const auto& info) { return info.param.arch + "_" + std::to_string(info.param.pooling_type); });

template <typename E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LlmEmbedErrors, FilesThatAreNotEmbeddingModels) {
  bert::EmbedOptions o;
  o.device = "cpu";
  o.max_length = 16;
  const std::string plain = temp_path("plain.gguf");
  write_with("qwen3", plain, {});
  expect_error<InvalidArgument>([&] { llm::LlmEmbedder(plain, o); }, "without qwen3.pooling_type");
  bert::EmbedOptions last = o;
  last.pooling = "last";
  llm::LlmEmbedder chosen(plain, last);  // a pooling named by the caller
  EXPECT_EQ(chosen.pooling(), llm::Pooling::Last);
  expect_error<InvalidArgument>([&] { chosen.embed({"text"}); }, "has no tokenizer");
  expect_error<InvalidArgument>([&] { chosen.embed_ids({std::vector<int32_t>(17, 1)}); }, "more than the max length 16");
  expect_error<InvalidArgument>([&] { chosen.embed_ids({{1, 99999}}); }, "outside the vocabulary");
  EXPECT_TRUE(llm::is_decoder_gguf(plain));
  EXPECT_NE(dynamic_cast<llm::LlmEmbedder*>(bert::open_text_embedder(plain, last).get()), nullptr);

  const std::string rank = temp_path("rank.gguf");
  write_with("qwen3", rank, {{"qwen3.pooling_type", GgufValue(uint32_t{4})}});
  expect_error<Unsupported>([&] { llm::LlmEmbedder(rank, o); }, "a reranker");
  fs::remove(plain);
  fs::remove(rank);
}

}  // namespace
