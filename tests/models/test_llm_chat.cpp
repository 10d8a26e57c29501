// Chat prompts (`rlx generate --chat`): each chat template format is
// recognized from excerpts of real models' tokenizer.chat_template, one turn
// is written exactly as those templates render it, and files without a
// template (or with one rlx does not know) are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "rlx/models/llm/chat.h"
#include "tests/models/model_paths.h"

using namespace rlx;
using llm::ChatFormat;

namespace {

TEST(ChatTemplate, FormatsAreRecognizedFromTheirMarkers) {
  // Excerpts of the templates as the models ship them.
  EXPECT_EQ(llm::detect_chat_format("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
                                    "message.content + '<|im_end|>' + '\\n' }}{%- endfor %}"),
            ChatFormat::ChatML);
  EXPECT_EQ(llm::detect_chat_format("{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "
                                    "\"\") }}{{ '<end_of_turn>\\n' }}"),
            ChatFormat::Gemma);
  EXPECT_EQ(llm::detect_chat_format("{% set content = '<|start_header_id|>' + message['role'] + "
                                    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"),
            ChatFormat::Llama3);
  EXPECT_EQ(llm::detect_chat_format("{% if message['role'] == 'user' %}{{'<|user|>' + '\\n' + message['content'] + "
                                    "'<|end|>' + '\\n'}}{% endif %}{{ '<|assistant|>\\n' }}"),
            ChatFormat::Phi3);
  EXPECT_EQ(llm::detect_chat_format("{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + "
                                    "message['content'] + '<|end_of_text|>\\n' }}"),
            ChatFormat::Granite);
  EXPECT_EQ(llm::detect_chat_format("{{ bos_token }}{% for message in messages %}[INST] {{ message['content'] }} "
                                    "[/INST]{% endfor %}"),
            std::nullopt);
}

TEST(ChatTemplate, OneTurnAsTheTemplatesRenderIt) {
  EXPECT_EQ(llm::format_chat(ChatFormat::ChatML, "Be brief.", "Hi"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::ChatML, "", "Hi"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::Gemma, "Be brief.", "Hi"),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::Gemma, "", "Hi"),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::Llama3, "Be brief.", "Hi"),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::Phi3, "", "Hi"), "<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(llm::format_chat(ChatFormat::Granite, "Be brief.", "Hi"),
            "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi"
            "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>");
}

TEST(ChatTemplate, FilesWithoutOneAreRefused) {
  const std::string path = (std::filesystem::temp_directory_path() / "rlx_test_chat.gguf").string();
  auto write = [&](const char* tmpl) {
    GgufWriter w;
    w.set("general.architecture", GgufValue(std::string("qwen3")));
    if (tmpl) w.set("tokenizer.chat_template", GgufValue(std::string(tmpl)));
    w.write(path);
    return GgufFile::open(path);
  };
  EXPECT_EQ(llm::chat_format_of(write("...<|im_start|>...")), ChatFormat::ChatML);
  try {
    llm::chat_format_of(write(nullptr));
    ADD_FAILURE() << "no error for a file without a template";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer.chat_template"), std::string::npos) << e.what();
  }
  EXPECT_THROW(llm::chat_format_of(write("[INST] {{ m }} [/INST]")), Unsupported);
  std::filesystem::remove(path);
}

}  // namespace
