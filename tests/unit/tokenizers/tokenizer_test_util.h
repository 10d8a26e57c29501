// Helpers shared by the tokenizer.json tests (test_unigram.cpp,
// test_byte_level_bpe.cpp): per-test temp folders, files, id printing, and
// checking that an error names what it should.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/models/tokenizers/sentence_tokenizer.h"

namespace rlx::test {

// A fresh folder under the test temp dir, one per test so ctest -j runs cannot collide.
inline std::filesystem::path tokenizer_temp_dir(const std::string& suite_dir, const std::string& name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / suite_dir /
                                    (std::string(test->test_suite_name()) + "." + test->name()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path.string();
}

inline std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

// `what()` must throw E whose message contains every part.
template <typename E, typename F>
void expect_error(F&& what, std::initializer_list<std::string> parts) {
  try {
    what();
    ADD_FAILURE() << "no exception; expected one naming " << *parts.begin();
  } catch (const E& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Encodes texts[i] (a JSON array of strings) up to max_length and compares
// with want[i] (lists of ids); every encoding must be one unpadded sequence.
// Reports the first five mismatches in full and returns their count.
inline size_t id_mismatches(const SentenceTokenizer& tok, const nlohmann::json& texts, const nlohmann::json& want,
                            int64_t max_length, const std::string& label) {
  EXPECT_EQ(texts.size(), want.size()) << label;
  size_t failures = 0;
  for (size_t i = 0; i < texts.size() && i < want.size(); ++i) {
    const auto text = texts[i].get<std::string>();
    const auto expected = want[i].get<std::vector<int32_t>>();
    const Encoding e = tok.encode(text, max_length);
    EXPECT_EQ(e.attention_mask, std::vector<int32_t>(e.input_ids.size(), 1)) << label;
    EXPECT_EQ(e.token_type_ids, std::vector<int32_t>(e.input_ids.size(), 0)) << label;
    if (e.input_ids != expected && ++failures <= 5)
      ADD_FAILURE() << label << " text " << i << " max_length " << max_length << ": " << text
                    << "\n got:  " << show(e.input_ids) << "\n want: " << show(expected);
  }
  return failures;
}

// Invalid UTF-8 is an InvalidArgument naming the first bad byte's offset,
// and in a batch the lowest bad text's index.
inline void expect_invalid_utf8_named(const SentenceTokenizer& tok) {
  const std::pair<std::string, std::string> bad[] = {
      {"abc\xff", "byte offset 3"},       {"ab\xC3", "byte offset 2"},
      {"a\xC0\xAF", "byte offset 1"},     {"\xED\xA0\x80x", "byte offset 0"},
      {"xy\xF4\x90\x80\x80", "byte offset 2"}, {"<s>\x80", "byte offset 3"},
  };
  for (const auto& [text, where] : bad) expect_error<InvalidArgument>([&] { tok.encode(text); }, {where});
  expect_error<InvalidArgument>([&] { tok.encode_batch({"ok", "fine", "bad\xff", "ok", "\xff", "x"}, 0, 3); },
                                {"text 2", "byte offset 3"});
}

}  // namespace rlx::test
