// A tiny random-weight LLM's decode graph (tests/models/tiny_llm.h) after the
// compile passes, as a backend lowers it. No GPU.
#pragma once
#include <filesystem>
#include <string>

#include "rlx/models/llm/config.h"
#include "rlx/models/llm/model.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/models/tiny_llm.h"

namespace rlx::test {

// f32 activations over an f16 cache by default (the cache writes convert,
// and Q and the attention's output are cast around the attention).
inline Graph lowered_decode_graph(const std::string& arch, DType kv_dtype = DType::F16,
                                  DType compute = DType::F32) {
  const std::string path = (std::filesystem::temp_directory_path() / ("rlx_decode_graph_" + arch + ".gguf")).string();
  write_tiny_gguf(tiny_spec(arch), path);
  const GgufFile f = GgufFile::open(path);
  const llm::LlmConfig cfg = llm::LlmConfig::from_gguf(f);
  llm::BuildOptions o;
  o.ctx = 64;
  o.kv_dtype = kv_dtype;
  o.compute = compute;
  const Graph g = llm::build_graph(cfg, f, o);
  register_builtin_backends();
  CompileOptions co;
  co.precision = compute;
  Graph low = Session("cpu").lower(g, co);
  std::filesystem::remove(path);
  return low;
}

}  // namespace rlx::test
