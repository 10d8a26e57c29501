// HF JSON helpers: typed getters name the file and key on missing or mistyped values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "rlx/formats/hf_config.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

std::string write_json(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "rlx_hf_config_test";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  return p.string();
}

// `fn` must throw FormatError whose message contains each of `parts`.
template <typename Fn>
void expect_format_error(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no FormatError";
  } catch (const FormatError& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(HfConfig, TypedGetters) {
  const std::string path = write_json("config.json", R"({
    "hidden_size": 384, "layer_norm_eps": 1e-12, "rope_theta": 10000, "model_type": "bert",
    "tie_word_embeddings": false, "architectures": ["BertModel"], "sizes": [1, 2, 3], "strip": null,
    "big": 18446744073709551615, "ratio": 2.5
  })");
  const HfConfig c = HfConfig::load(path);
  EXPECT_EQ(c.get<int64_t>("hidden_size"), 384);
  EXPECT_DOUBLE_EQ(c.get<double>("layer_norm_eps"), 1e-12);
  EXPECT_DOUBLE_EQ(c.get<double>("rope_theta"), 10000.0);  // integers are valid numbers
  EXPECT_EQ(c.get<std::string>("model_type"), "bert");
  EXPECT_FALSE(c.get<bool>("tie_word_embeddings"));
  EXPECT_EQ(c.get<std::vector<std::string>>("architectures"), std::vector<std::string>{"BertModel"});
  EXPECT_EQ(c.get<std::vector<int64_t>>("sizes"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.get_or<int64_t>("num_labels", 2), 2);
  EXPECT_EQ(c.get_opt<bool>("strip"), std::nullopt);  // null reads as absent
  EXPECT_FALSE(c.has("strip"));
  EXPECT_TRUE(c.has("hidden_size"));

  expect_format_error([&] { c.get<int64_t>("vocab_size"); }, {path, "'vocab_size'", "missing"});
  expect_format_error([&] { c.get<int64_t>("model_type"); }, {path, "'model_type'", "integer", "string"});
  expect_format_error([&] { c.get<int64_t>("ratio"); }, {path, "'ratio'", "integer"});
  expect_format_error([&] { c.get<int64_t>("big"); }, {path, "'big'", "int64"});
  expect_format_error([&] { c.get<bool>("hidden_size"); }, {path, "'hidden_size'", "boolean"});
  expect_format_error([&] { c.get<std::vector<int64_t>>("architectures"); }, {path, "'architectures'"});
  expect_format_error([&] { json_get<int64_t>(c.json()["sizes"], "x", "cfg: sizes"); }, {"cfg: sizes", "object"});
}

TEST(HfConfig, FileErrors) {
  expect_format_error([] { HfConfig::load(write_json("bad.json", R"({"a": 1,)")); }, {"bad.json", "invalid JSON"});
  expect_format_error([] { HfConfig::load(write_json("empty.json", "")); }, {"empty.json", "invalid JSON"});
  expect_format_error([] { HfConfig::load(write_json("array.json", "[1]")); }, {"array.json", "JSON object"});
  expect_format_error([] { HfConfig::load("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
  expect_format_error([] { load_json_file(write_json("big.json", "{\"a\": 12345}"), 4); }, {"big.json", "limit"});
}

}  // namespace
}  // namespace rlx
