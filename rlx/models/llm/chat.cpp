#include "rlx/models/llm/chat.h"

#include "rlx/core/error.h"

namespace rlx::llm {

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Gemma: return "gemma";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Phi3: return "phi3";
    case ChatFormat::Granite: return "granite";
  }
  return "?";
}

std::optional<ChatFormat> detect_chat_format(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_start|>")) return ChatFormat::ChatML;  // Qwen, SmolLM, ...
  if (has("<start_of_turn>")) return ChatFormat::Gemma;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFormat::Llama3;
  if (has("<|start_of_role|>")) return ChatFormat::Granite;
  if (has("<|assistant|>") && has("<|end|>")) return ChatFormat::Phi3;
  return std::nullopt;
}

std::string format_chat(ChatFormat f, const std::string& system, const std::string& user) {
  std::string out;
  switch (f) {
    case ChatFormat::ChatML:
      if (!system.empty()) out += "<|im_start|>system\n" + system + "<|im_end|>\n";
      out += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
      break;
    case ChatFormat::Gemma:  // no system role: it opens the user's turn
      out += "<start_of_turn>user\n" + (system.empty() ? std::string() : system + "\n\n") + user +
             "<end_of_turn>\n<start_of_turn>model\n";
      break;
    case ChatFormat::Llama3:
      if (!system.empty()) out += "<|start_header_id|>system<|end_header_id|>\n\n" + system + "<|eot_id|>";
      out += "<|start_header_id|>user<|end_header_id|>\n\n" + user +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::Phi3:
      if (!system.empty()) out += "<|system|>\n" + system + "<|end|>\n";
      out += "<|user|>\n" + user + "<|end|>\n<|assistant|>\n";
      break;
    case ChatFormat::Granite:
      if (!system.empty()) out += "<|start_of_role|>system<|end_of_role|>" + system + "<|end_of_text|>\n";
      out += "<|start_of_role|>user<|end_of_role|>" + user +
             "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>";
      break;
  }
  return out;
}

ChatFormat chat_format_of(const GgufFile& f) {
  RLX_CHECK(f.contains("tokenizer.chat_template"), "generate: ", f.source(),
            " has no tokenizer.chat_template (a base model?); give the prompt without --chat");
  const auto fmt = detect_chat_format(f.get<std::string>("tokenizer.chat_template"));
  if (!fmt)
    throw Unsupported(str("generate: ", f.source(), "'s chat template is not one rlx knows (chatml, gemma, llama3, "
                          "phi3, granite); write the turn markers into the prompt and leave out --chat"));
  return *fmt;
}

}  // namespace rlx::llm
