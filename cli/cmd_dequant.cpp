// rlx dequant: one tensor of a weights file converted to f32, as .npy (the
// values little-endian f32 in GGUF element order, ne[0] fastest, after the
// .npy header), on the CPU (the reference) or with the CUDA dequantizer.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "cli/common.h"
#include "cli/model_file.h"
#include "rlx/formats/quant.h"

#ifdef RLX_HAVE_CUDA
#include <cuda_runtime.h>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/backends/cuda/memory.h"
#endif

namespace rlx::cli {
namespace {

struct DequantOptions {
  std::string file;
  std::string tensor;
  std::string device = "cpu";
  std::string output;
};

// The tensor dequantized by the CUDA kernels on device 0.
Tensor dequantize_on_cuda(const Tensor& src, const std::string& name) {
#ifdef RLX_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw Unsupported("dequant --device cuda: no CUDA device is available (use --device cpu)");
  RLX_CHECK_AS(Unsupported, cuda::has_cuda_dequant_kernel(src.dtype()), "dequant --device cuda: tensor '", name,
               "' has type ", src.dtype(), ", which the CUDA dequantizer does not decode (use --device cpu)");
  Tensor out = Tensor::empty(DType::F32, src.shape());
  if (out.numel() == 0) return out;
  RLX_CUDA_CHECK(cudaSetDevice(0));
  cuda::DeviceBuffer in(0, src.nbytes(), "dequant input"), res(0, out.nbytes(), "dequant output");
  in.upload(src.raw(), src.nbytes());
  cuda::launch_dequantize(src.dtype(), in.data(), DType::F32, res.data(), src.numel(), nullptr);
  RLX_CUDA_CHECK(cudaDeviceSynchronize());
  res.download(out.raw_mut(), out.nbytes());
  return out;
#else
  (void)name;
  not_available("dequant", "--device cuda: this build has no CUDA backend");
  return src;
#endif
}

void run_dequant(const DequantOptions& o) {
  const WeightsFile w = WeightsFile::open(o.file);
  const Tensor src = w.tensor(o.tensor);
  RLX_CHECK(has_cpu_dequant(src.dtype()), "dequant: tensor '", o.tensor, "' has type ", src.dtype(),
            ", which has no f32 conversion");
  const Tensor out = o.device == "cuda" ? dequantize_on_cuda(src, o.tensor) : dequantize(src);
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
  std::cerr << o.tensor << ": " << src.dtype() << " " << shape_str(src.shape()) << " -> f32 (" << o.device << ") "
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
