// BERT-family GGUF files as llama.cpp's convert_hf_to_gguf.py writes them.
//
// What is read:
//  1. general.architecture: "bert" or "nomic-bert" (ARCH below).
//  2. ARCH.{embedding_length, block_count, feed_forward_length, context_length,
//     attention.head_count, attention.layer_norm_epsilon}, ARCH.pooling_type
//     (1 mean, 2 CLS; absent = mean), nomic-bert: ARCH.rope.freq_base.
//  3. Tensors, ne[0] fastest (so a linear weight [out, in] has ne = {in, out}):
//     token_embd, token_types, position_embd (bert), token_embd_norm;
//     blk.N.{attn_q, attn_k, attn_v (bert) | attn_qkv (nomic-bert),
//     attn_output, attn_output_norm, ffn_up, ffn_gate (nomic-bert: the SwiGLU
//     gate, HF fc12), ffn_down, layer_output_norm}. Each maps to the Hugging
//     Face name the builders use. Weights are F32, F16, BF16 or a quant type
//     (linear weights then stay packed and run through DequantMatMul;
//     embedding tables are dequantized once at load).
//  4. tokenizer.ggml.{model = "bert", tokens, token_type, unknown_token_id,
//     seperator_token_id (else eos_token_id), padding_token_id, cls_token_id
//     (else bos_token_id)}: the converter's
//     "phantom space" spelling (word-initial pieces get U+2581, "##"
//     continuations lose the "##", control tokens are left alone) is undone.
//
// Not recorded in the file, so chosen here: GELU is the erf form (what the
// HF BERT models use), and embeddings are L2-normalized (as llama.cpp's
// embedding tool and sentence-transformers' Normalize module return them).
// Lowercasing and accent stripping are on, as in llama.cpp's WPM tokenizer.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "rlx/formats/gguf.h"
#include "rlx/models/bert/bert_internal.h"
#include "rlx/models/tokenizers/byte_level_bpe_tokenizer.h"
#include "rlx/models/tokenizers/hf_files.h"
#include "rlx/models/tokenizers/unigram.h"
#include "rlx/models/tokenizers/wordpiece.h"

namespace rlx::bert {

using namespace detail;

namespace {

struct NameMap {
  const char* hf;
  const char* gguf;
};

// Global tensors, then per-layer suffixes ("encoder.layer.N." → "blk.N.").
constexpr NameMap kBertGlobal[] = {
    {"embeddings.word_embeddings.weight", "token_embd.weight"},
    {"embeddings.position_embeddings.weight", "position_embd.weight"},
    {"embeddings.token_type_embeddings.weight", "token_types.weight"},
    {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
    {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
};
constexpr NameMap kBertLayer[] = {
    {"attention.self.query.weight", "attn_q.weight"}, {"attention.self.query.bias", "attn_q.bias"},
    {"attention.self.key.weight", "attn_k.weight"},   {"attention.self.key.bias", "attn_k.bias"},
    {"attention.self.value.weight", "attn_v.weight"}, {"attention.self.value.bias", "attn_v.bias"},
    {"attention.output.dense.weight", "attn_output.weight"},
    {"attention.output.dense.bias", "attn_output.bias"},
    {"attention.output.LayerNorm.weight", "attn_output_norm.weight"},
    {"attention.output.LayerNorm.bias", "attn_output_norm.bias"},
    {"intermediate.dense.weight", "ffn_up.weight"},   {"intermediate.dense.bias", "ffn_up.bias"},
    {"output.dense.weight", "ffn_down.weight"},       {"output.dense.bias", "ffn_down.bias"},
    {"output.LayerNorm.weight", "layer_output_norm.weight"},
    {"output.LayerNorm.bias", "layer_output_norm.bias"},
};
constexpr NameMap kNomicGlobal[] = {
    {"embeddings.word_embeddings.weight", "token_embd.weight"},
    {"embeddings.token_type_embeddings.weight", "token_types.weight"},
    {"emb_ln.weight", "token_embd_norm.weight"},
    {"emb_ln.bias", "token_embd_norm.bias"},
};
constexpr NameMap kNomicLayer[] = {
    {"attn.Wqkv.weight", "attn_qkv.weight"},     {"attn.out_proj.weight", "attn_output.weight"},
    {"norm1.weight", "attn_output_norm.weight"}, {"norm1.bias", "attn_output_norm.bias"},
    {"mlp.fc11.weight", "ffn_up.weight"},        {"mlp.fc12.weight", "ffn_gate.weight"},
    {"mlp.fc2.weight", "ffn_down.weight"},       {"norm2.weight", "layer_output_norm.weight"},
    {"norm2.bias", "layer_output_norm.bias"},
};

const char* arch_name(Arch a) { return a == Arch::NomicBert ? "nomic-bert" : "bert"; }

Arch gguf_arch(const GgufFile& f) {
  const std::string& arch = f.get<std::string>("general.architecture");
  if (arch == "bert") return Arch::Bert;
  if (arch == "nomic-bert") return Arch::NomicBert;
  throw Unsupported(str(f.source(), ": general.architecture '", arch,
                        "' is not an embedding model rlx supports ('bert', 'nomic-bert')"));
}

class GgufSource : public WeightSource {
 public:
  explicit GgufSource(const GgufFile& f) : f_(f), arch_(gguf_arch(f)) {}
  std::optional<Tensor> find(const std::string& hf) const override {
    const GgufTensorInfo* t = f_.find_tensor(gguf_name(hf));
    if (!t) return std::nullopt;
    return f_.view(*t);
  }
  std::string describe(const std::string& hf) const override {
    return str(f_.source(), ": tensor '", gguf_name(hf), "' (", hf, ")");
  }

 private:
  // llama.cpp's name for a Hugging Face one ("" when there is none).
  std::string gguf_name(const std::string& hf) const {
    const bool nomic = arch_ == Arch::NomicBert;
    for (const auto& m : nomic ? std::span<const NameMap>(kNomicGlobal) : std::span<const NameMap>(kBertGlobal))
      if (hf == m.hf) return m.gguf;
    const std::string prefix = nomic ? "encoder.layers." : "encoder.layer.";
    if (!hf.starts_with(prefix)) return "";
    const size_t dot = hf.find('.', prefix.size());
    if (dot == std::string::npos) return "";
    const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
    const std::string suffix = hf.substr(dot + 1);
    for (const auto& m : nomic ? std::span<const NameMap>(kNomicLayer) : std::span<const NameMap>(kBertLayer))
      if (suffix == m.hf) return str("blk.", layer, ".", m.gguf);
    return "";
  }
  const GgufFile& f_;
  Arch arch_;
};

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

BertConfig BertConfig::from_gguf(const GgufFile& f) {
  BertConfig c;
  c.arch = gguf_arch(f);
  const std::string a = arch_name(c.arch);
  c.hidden = f.get_int(a + ".embedding_length");
  c.layers = f.get_int(a + ".block_count");
  c.heads = f.get_int(a + ".attention.head_count");
  c.intermediate = f.get_int(a + ".feed_forward_length");
  c.max_position = f.get_int(a + ".context_length");
  c.layer_norm_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_epsilon"));
  RLX_FORMAT_CHECK(c.hidden > 0 && c.heads > 0 && c.hidden % c.heads == 0, f.source(), ": ", a,
                   ".embedding_length ", c.hidden, " is not a multiple of ", a, ".attention.head_count ", c.heads);
  RLX_FORMAT_CHECK(c.layers > 0 && c.layers < 1000 && c.intermediate > 0 && c.max_position > 0, f.source(),
                   ": implausible sizes");
  // Table sizes come from the tensors themselves.
  c.vocab_size = f.tensor("token_embd.weight").shape()[0];
  const GgufTensorInfo* types = f.find_tensor("token_types.weight");
  c.type_vocab = types ? types->shape()[0] : 0;
  // DistilBERT files (converted as "bert") have no token-type table; the graph then has none.

  const int64_t pooling = f.contains(a + ".pooling_type") ? f.get_int(a + ".pooling_type") : 1;
  if (pooling == 1) c.pooling = Pooling::Mean;
  else if (pooling == 2) c.pooling = Pooling::Cls;
  else throw Unsupported(str(f.source(), ": ", a, ".pooling_type ", pooling,
                             " is not supported for sentence embeddings (1 = mean, 2 = CLS)"));
  c.normalize = true;
  if (c.arch == Arch::NomicBert) {
    c.rope_base = static_cast<float>(f.get_float(a + ".rope.freq_base"));
    c.rope_dims = c.hidden / c.heads;  // the converter accepts rotary_emb_fraction 1.0 only
  }
  // Linear weights keep the first one's storage type when it is packed.
  const DType lt = f.tensor("blk.0.attn_output.weight").type;
  c.linear_dtype = is_quant(lt) ? lt : DType::F32;
  return c;
}

std::map<std::string, Tensor> load_weights(const BertConfig& c, const GgufFile& f) {
  GgufSource src(f);
  return c.arch == Arch::NomicBert ? load_nomic_weights(c, src) : load_bert_weights(c, src);
}

namespace {

using Json = nlohmann::json;

// The parts of a tokenizer.json that a GGUF vocabulary determines whatever its
// model: unknown, control and user-defined pieces as added tokens (<mask> with
// lstrip, as transformers defines it for RoBERTa and XLM-R; the file cannot
// say so), <s> … </s> from the cls/sep (else bos/eos) ids, the pad id.
Json tokenizer_json_common(const GgufFile& f, const std::vector<std::string>& tokens) {
  const auto& kinds = f.get_array<int32_t>("tokenizer.ggml.token_type");
  RLX_FORMAT_CHECK(kinds.size() == tokens.size(), f.source(), ": tokenizer.ggml.token_type has ", kinds.size(),
                   " entries for ", tokens.size(), " tokens");
  constexpr int32_t kUnknown = 2, kControl = 3, kUserDefined = 4;  // llama.cpp's token types
  Json added = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (kinds[i] == kUnknown || kinds[i] == kControl || kinds[i] == kUserDefined)
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"special", kinds[i] != kUserDefined},
                       {"normalized", false},
                       {"lstrip", tokens[i] == "<mask>"}});
  auto id = [&](const char* key, const char* fallback) {
    const int64_t v = f.get_int(f.contains(key) || !fallback ? key : fallback);
    RLX_FORMAT_CHECK(v >= 0 && v < static_cast<int64_t>(tokens.size()), f.source(), ": ", key, " ", v,
                     " is outside the vocabulary of ", tokens.size());
    return v;
  };
  const int64_t cls = id("tokenizer.ggml.cls_token_id", "tokenizer.ggml.bos_token_id");
  const int64_t sep = id("tokenizer.ggml.seperator_token_id", "tokenizer.ggml.eos_token_id");
  return {{"post_processor",
           {{"type", "RobertaProcessing"},
            {"cls", {tokens[static_cast<size_t>(cls)], cls}},
            {"sep", {tokens[static_cast<size_t>(sep)], sep}}}},
          {"added_tokens", added},
          {"padding", {{"pad_id", id("tokenizer.ggml.padding_token_id", nullptr)}}}};
}

// llama.cpp's "t5" vocabulary (what its converter writes for XLM-RoBERTa
// models: bge-m3, multilingual-e5) as the tokenizer.json those models ship:
// Precompiled (+ Replace ' {2,}' with remove_extra_whitespaces), Metaspace,
// Unigram over the pieces' scores.
Json unigram_tokenizer_json(const GgufFile& f) {
  const auto& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  const auto& scores = f.get_array<float>("tokenizer.ggml.scores");
  RLX_FORMAT_CHECK(scores.size() == tokens.size(), f.source(), ": tokenizer.ggml.scores has ", scores.size(),
                   " entries for ", tokens.size(), " tokens");
  Json j = tokenizer_json_common(f, tokens);
  Json vocab = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i) vocab.push_back({tokens[i], scores[i]});
  Json normalizers = Json::array();
  if (const char* key = "tokenizer.ggml.precompiled_charsmap"; f.contains(key)) {
    // u8 or i8 elements, as llama.cpp accepts.
    const auto* u8 = std::get_if<std::vector<uint8_t>>(&f.get<GgufArray>(key).items);
    std::string bytes;
    if (u8) bytes.assign(u8->begin(), u8->end());
    else for (int8_t b : f.get_array<int8_t>(key)) bytes.push_back(static_cast<char>(b));
    normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", rlx::detail::base64_encode(bytes)}});
  }
  if (f.get_or<bool>("tokenizer.ggml.remove_extra_whitespaces", true))
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
  const bool prefix = f.get_or<bool>("tokenizer.ggml.add_space_prefix", true);
  j["model"] = {{"type", "Unigram"}, {"unk_id", f.get_int("tokenizer.ggml.unknown_token_id")}, {"vocab", vocab}};
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", prefix ? "always" : "never"},
                        {"split", true}};
  return j;
}

// llama.cpp's "gpt2" vocabulary in a BERT file (RoBERTa models, pre
// "roberta-bpe" or GPT-2's) as RoBERTa's tokenizer.json: ByteLevel with the
// GPT-2 regex, BPE by the merges' order.
Json bpe_tokenizer_json(const GgufFile& f) {
  const std::string pre = f.get_or<std::string>("tokenizer.ggml.pre", "default");
  if (pre != "roberta-bpe" && pre != "default" && pre != "gpt2" && pre != "gpt-2")
    throw Unsupported(str(f.source(), ": tokenizer.ggml.pre '", pre,
                          "' is not supported in an embedding model (roberta-bpe, gpt2, default)"));
  const auto& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  Json j = tokenizer_json_common(f, tokens);
  Json vocab = Json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", f.get_array<std::string>("tokenizer.ggml.merges")}};
  if (f.contains("tokenizer.ggml.unknown_token_id")) {
    const int64_t unk = f.get_int("tokenizer.ggml.unknown_token_id");
    RLX_FORMAT_CHECK(unk >= 0 && unk < static_cast<int64_t>(tokens.size()), f.source(),
                     ": tokenizer.ggml.unknown_token_id ", unk, " is outside the vocabulary");
    j["model"]["unk_token"] = tokens[static_cast<size_t>(unk)];
  }
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return j;
}

}  // namespace

std::shared_ptr<const SentenceTokenizer> sentence_tokenizer_from_gguf(const GgufFile& f) {
  const std::string& model = f.get<std::string>("tokenizer.ggml.model");
  std::shared_ptr<SentenceTokenizer> tok;
  if (model == "t5")
    tok = std::make_shared<UnigramTokenizer>(
        UnigramTokenizer::from_tokenizer_json(unigram_tokenizer_json(f), f.source()));
  else if (model == "gpt2")
    tok = std::make_shared<ByteLevelBpeTokenizer>(
        ByteLevelBpeTokenizer::from_tokenizer_json(bpe_tokenizer_json(f), f.source()));
  else
    return std::make_shared<WordPieceTokenizer>(tokenizer_from_gguf(f));
  tok->set_default_max_length(f.get_int(str(arch_name(gguf_arch(f)), ".context_length")));
  return tok;
}

WordPieceTokenizer tokenizer_from_gguf(const GgufFile& f) {
  const std::string& model = f.get<std::string>("tokenizer.ggml.model");
  if (model != "bert")
    throw Unsupported(str(f.source(), ": tokenizer.ggml.model '", model,
                          "' is not supported (bert: WordPiece, t5: SentencePiece Unigram, gpt2: byte-level BPE)"));
  const auto& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  const auto& kinds = f.get_array<int32_t>("tokenizer.ggml.token_type");
  RLX_FORMAT_CHECK(kinds.size() == tokens.size(), f.source(), ": tokenizer.ggml.token_type has ", kinds.size(),
                   " entries for ", tokens.size(), " tokens");
  constexpr int32_t kControl = 3;  // llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
  const std::string phantom = "\u2581";
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<WordPieceTokenizer::AddedToken> added;
  vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const auto id = static_cast<int32_t>(i);
    if (kinds[i] == kControl) {
      vocab.emplace_back(t, id);
      added.push_back({t, id, false});  // special tokens match verbatim, as HF's added tokens do
    } else if (t.starts_with(phantom)) {
      vocab.emplace_back(t.substr(phantom.size()), id);
    } else if (t.size() > 2 && t.front() == '[' && t.back() == ']') {
      vocab.emplace_back(t, id);  // older converters kept every "[...]" token unprefixed
    } else {
      vocab.emplace_back("##" + t, id);
    }
  }
  // Older files (and gguf-py versions without a cls handler) store [CLS] and
  // [SEP] as BOS and EOS, which is how llama.cpp reads them for BERT.
  auto token_at = [&](const char* key, const char* fallback_key = nullptr) {
    if (fallback_key && !f.contains(key)) key = fallback_key;
    const int64_t id = f.get_int(key);
    RLX_FORMAT_CHECK(id >= 0 && id < static_cast<int64_t>(vocab.size()), f.source(), ": ", key, " ", id,
                     " is outside the vocabulary of ", vocab.size());
    return vocab[static_cast<size_t>(id)].first;
  };
  WordPieceConfig cfg;
  cfg.unk_token = token_at("tokenizer.ggml.unknown_token_id");
  cfg.sep_token = token_at("tokenizer.ggml.seperator_token_id", "tokenizer.ggml.eos_token_id");
  cfg.cls_token = token_at("tokenizer.ggml.cls_token_id", "tokenizer.ggml.bos_token_id");
  cfg.pad_token = token_at("tokenizer.ggml.padding_token_id");
  const std::string a = arch_name(gguf_arch(f));
  cfg.model_max_length = f.get_int(a + ".context_length");
  return WordPieceTokenizer(std::move(vocab), cfg, std::move(added), f.source());
}

}  // namespace rlx::bert
