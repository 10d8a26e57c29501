#include "rlx/models/tokenizers/sentence_tokenizer.h"

#include <filesystem>

#include "rlx/core/error.h"
#include "rlx/core/log.h"
#include "rlx/formats/hf_config.h"
#include "rlx/models/tokenizers/byte_level_bpe_tokenizer.h"
#include "rlx/models/tokenizers/unigram.h"
#include "rlx/models/tokenizers/wordpiece.h"

namespace rlx {

void apply_sentence_transformers_config(const std::string& dir, SentenceTokenizer& tok) {
  const auto path = std::filesystem::path(dir) / "sentence_bert_config.json";
  if (!std::filesystem::exists(path)) return;
  const HfConfig st = HfConfig::load(path.string());
  if (auto n = st.get_opt<int64_t>("max_seq_length")) {
    RLX_FORMAT_CHECK(*n >= 2, st.source(), ": max_seq_length ", *n, " leaves no room for the two special tokens");
    tok.set_default_max_length(*n);
  }
  // sentence-transformers then runs Python's str.lower() on each text before
  // the tokenizer; rlx does not reproduce that pass.
  if (st.get_or<bool>("do_lower_case", false))
    log_warn(st.source(), ": do_lower_case is set; rlx does not lowercase texts before the tokenizer (only the "
                          "tokenizer's own normalizer runs)");
}

std::shared_ptr<SentenceTokenizer> load_sentence_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::shared_ptr<SentenceTokenizer> tok;
  if (fs::exists(d / "tokenizer.json")) {
    const std::string path = (d / "tokenizer.json").string();
    const auto j = load_json_file(path);
    RLX_FORMAT_CHECK(j.is_object(), path, ": expected a JSON object but found ", j.type_name());
    const auto model = j.find("model");
    RLX_FORMAT_CHECK(model != j.end() && model->is_object(), path, ": 'model' is missing or not an object");
    const auto type = json_get_or<std::string>(*model, "type", "", path + ": model");
    if (type == "Unigram")
      tok = std::make_shared<UnigramTokenizer>(UnigramTokenizer::from_tokenizer_json(j, path));
    else if (type == "BPE")
      tok = std::make_shared<ByteLevelBpeTokenizer>(ByteLevelBpeTokenizer::from_tokenizer_json(j, path));
    else
      tok = std::make_shared<WordPieceTokenizer>(WordPieceTokenizer::from_tokenizer_json(j, path));  // names others
  } else if (fs::exists(d / "vocab.txt")) {
    tok = std::make_shared<WordPieceTokenizer>(WordPieceTokenizer::from_vocab_txt((d / "vocab.txt").string()));
  } else {
    throw FormatError(str(dir, ": neither tokenizer.json nor vocab.txt found"));
  }
  apply_sentence_transformers_config(dir, *tok);
  return tok;
}

}  // namespace rlx
