// rlx dequant: one tensor of a weights file converted to f32, as .npy.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "cli/common.h"
#include "cli/model_file.h"
#include "rlx/formats/quant.h"

namespace rlx::cli {
namespace {

struct DequantOptions {
  std::string file;
  std::string tensor;
  std::string device = "cpu";
  std::string output;
};

void run_dequant(const DequantOptions& o) {
  if (o.device != "cpu") not_available("dequant", "--device " + o.device + ": only the CPU reference is built");
  const WeightsFile w = WeightsFile::open(o.file);
  const Tensor src = w.tensor(o.tensor);
  RLX_CHECK(has_cpu_dequant(src.dtype()), "dequant: tensor '", o.tensor, "' has type ", src.dtype(),
            ", which has no f32 conversion");
  const Tensor out = dequantize(src);
  write_npy_file(o.output, out);
  // A one-line summary on stderr so the .npy on stdout stays clean.
  const float* p = out.data<float>();
  const int64_t n = out.numel();
  double sum = 0.0;
  float lo = n ? p[0] : 0.0f, hi = lo;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
    sum += p[i];
  }
  std::cerr << o.tensor << ": " << src.dtype() << " " << shape_str(src.shape()) << " -> f32 "
            << (o.output == "-" ? "stdout" : o.output) << " (min " << lo << ", max " << hi << ", mean "
            << (n ? sum / static_cast<double>(n) : 0.0) << ")\n";
}

}  // namespace

void add_dequant_command(CLI::App& app) {
  auto o = std::make_shared<DequantOptions>();
  auto* cmd = app.add_subcommand("dequant", "Dequantize one tensor of a GGUF or safetensors file to f32 (.npy)");
  cmd->add_option("file", o->file, "A .gguf or .safetensors file")->required();
  cmd->add_option("--tensor", o->tensor, "Tensor name (see `rlx inspect`)")->type_name("NAME")->required();
  cmd->add_option("--device", o->device, "Where to dequantize: cpu (the reference) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output .npy file (float32, the tensor's shape); '-' = stdout")
      ->type_name("OUT")
      ->required();
  cmd->callback([o] { run_dequant(*o); });
}

}  // namespace rlx::cli
