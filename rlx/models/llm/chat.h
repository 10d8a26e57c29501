// Chat prompts for instruction-tuned GGUF models (`rlx generate --chat`): the
// file's tokenizer.chat_template (Jinja) is recognized by the markers its
// format uses, as llama.cpp does, and one system + user turn is written in
// that format with the assistant's turn opened. BOS is not part of the text:
// the tokenizer adds it when the file says so.
#pragma once
#include <optional>
#include <string>

#include "rlx/formats/gguf.h"

namespace rlx::llm {

enum class ChatFormat { ChatML, Gemma, Llama3, Phi3, Granite };
const char* chat_format_name(ChatFormat f);

// The format a Jinja chat template writes, or nullopt when rlx does not know it.
std::optional<ChatFormat> detect_chat_format(const std::string& jinja);

// The prompt for one turn: `system` (may be empty) and `user`, then the
// assistant's header.
std::string format_chat(ChatFormat f, const std::string& system, const std::string& user);

// The file's format; an error naming what is missing or unknown.
ChatFormat chat_format_of(const GgufFile& f);

}  // namespace rlx::llm
