// libFuzzer target for the GGUF reader: any input must either parse or throw
// rlx::FormatError — never crash, hang or read out of bounds. On success it
// also does what a loader would: render the metadata, make a tensor view and
// dequantize the start of each tensor.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const rlx::GgufFile f = rlx::GgufFile::from_memory(data, size, nullptr, "fuzz.gguf");
    for (const auto& [key, value] : f.metadata()) (void)rlx::gguf_value_str(value);
    std::vector<float> out;
    for (const rlx::GgufTensorInfo& t : f.tensors()) {
      (void)f.view(t);
      const int64_t block = rlx::dtype_info(t.type).block_elems;
      const int64_t n = std::min<int64_t>(t.numel(), 1 << 16) / block * block;
      if (n == 0 || !rlx::has_cpu_dequant(t.type)) continue;
      out.resize(static_cast<size_t>(n));
      rlx::dequantize_row(t.type, t.data, out.data(), n);
    }
  } catch (const rlx::FormatError&) {
    // the expected outcome for malformed input
  }
  return 0;
}
