// rlx custom op: add your own fused op with a CPU kernel and a CUDA kernel
// given as source (NVRTC compiles it at first use and caches it on disk).
//
//   scaled_sq_relu(x, b) = scale · relu(x + b)²     (b broadcast over the last dim)
//
// the squared-ReLU activation of Primer-style MLPs with its bias folded in:
// one pass over memory instead of three built-in ops. The graph
// y = scaled_sq_relu(x · W, b) runs on the CPU and, when a GPU is present, on
// CUDA; the two results are compared. See docs/custom_ops.md.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/custom_kernels.h"
#include "rlx/runtime/session.h"

namespace {

using rlx::DType;

// 1. The op: inputs x [..., N] and b [N] of one float dtype; the output has x's type.
rlx::TensorType infer_scaled_sq_relu(const std::vector<rlx::TensorType>& in, const rlx::CustomAttrs&) {
  const rlx::TensorType& x = in[0];
  const rlx::TensorType& b = in[1];
  RLX_SHAPE_CHECK(x.rank() >= 1, "scaled_sq_relu: x must have at least one dim");
  RLX_SHAPE_CHECK(b.rank() == 1 && b.shape[0] == x.shape.back(), "scaled_sq_relu: b must be [",
                  x.shape.back().to_string(), "] (x's last dim), got ", b.to_string());
  RLX_SHAPE_CHECK(b.dtype == x.dtype, "scaled_sq_relu: b is ", b.dtype, " but x is ", x.dtype);
  return x;
}

// 2. The CPU kernel (f32).
void cpu_scaled_sq_relu(rlx::cpu::KernelArgs& a) {
  const float scale = static_cast<float>(rlx::custom_attr_number(a.attrs<rlx::CustomAttrs>(), "scale", 1.0));
  const float* x = a.in<float>(0);
  const float* b = a.in<float>(1);
  float* y = a.out<float>();
  const int64_t n = a.out_numel(), cols = a.in_dims(1)[0];
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fmax(x[i] + b[i % cols], 0.0f);
    y[i] = scale * v * v;
  }
}

// 3. The CUDA kernel as source. Parameters: the input pointers, the output
//    pointer, then the scalars that params() below returns, in order.
constexpr const char* kCudaSource = R"(
extern "C" __global__ void scaled_sq_relu(const float* x, const float* b, float* y,
                                          long long n, int cols, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const float v = fmaxf(x[i] + b[i % cols], 0.0f);
    y[i] = scale * v * v;
  }
}
)";

rlx::CudaSourceKernel cuda_scaled_sq_relu() {
  rlx::CudaSourceKernel k;
  k.source = kCudaSource;
  k.entry = "scaled_sq_relu";
  k.launch_config = [](const rlx::CudaKernelArgs& a) {
    const int64_t blocks = (a.output.numel() + 255) / 256;
    rlx::CudaLaunchConfig c;
    c.grid = {static_cast<unsigned>(std::min<int64_t>(blocks, 65536)), 1, 1};  // grid-stride beyond that
    c.block = {256, 1, 1};
    return c;
  };
  k.params = [](const rlx::CudaKernelArgs& a) {
    return std::vector<rlx::CudaKernelParam>{
        a.output.numel(), static_cast<int32_t>(a.inputs[1].dims[0]),
        static_cast<float>(rlx::custom_attr_number(a.attrs, "scale", 1.0))};
  };
  return k;
}

void register_scaled_sq_relu() {
  rlx::define_custom_op({"scaled_sq_relu", 2, 2, infer_scaled_sq_relu});
  rlx::register_custom_cpu_kernel("scaled_sq_relu", {DType::F32, DType::F32, DType::F32}, cpu_scaled_sq_relu);
  if (rlx::custom_cuda_kernels_available())
    rlx::register_custom_cuda_kernel("scaled_sq_relu", {DType::F32, DType::F32, DType::F32}, cuda_scaled_sq_relu());
}

rlx::Tensor run_on(const std::string& device, const rlx::Graph& g, const rlx::Tensor& x) {
  rlx::Session session(device);
  auto exe = session.compile(g);
  exe->set_param("w", rlx::Tensor::from<float>({0.1f, 0.2f, -0.3f, 0.4f,
                                                0.5f, -0.6f, 0.7f, 0.8f,
                                                -0.9f, 1.0f, 0.1f, -0.2f}, {3, 4}));
  exe->set_param("b", rlx::Tensor::from<float>({0.1f, -0.1f, 0.2f, 0.0f}, {4}));
  return exe->run({x})[0];
}

}  // namespace

int main() try {
  register_scaled_sq_relu();

  // 4. Use it in a graph like any op; attributes are scalars by name.
  rlx::Graph g;
  auto x = rlx::input(g, "x", DType::F32, {"B", 3});
  auto w = rlx::param(g, "w", DType::F32, {3, 4});
  auto b = rlx::param(g, "b", DType::F32, {4});
  rlx::output("y", rlx::custom("scaled_sq_relu", {rlx::matmul(x, w), b}, {{"scale", 0.5}}));

  const auto xv = rlx::Tensor::from<float>({1.0f, 2.0f, 3.0f,
                                            -1.0f, 1.0f, 2.0f}, {2, 3});
  const rlx::Tensor y = run_on("cpu", g, xv);
  const float* p = y.data<float>();
  for (int64_t i = 0; i < y.dim(0); ++i) {
    std::printf("y[%ld] =", static_cast<long>(i));
    for (int64_t j = 0; j < y.dim(1); ++j) std::printf(" %.4f", p[i * y.dim(1) + j]);
    std::printf("\n");
  }

  rlx::register_builtin_backends();
  if (!rlx::backend_available("cuda")) {
    std::printf("cuda: no device, skipped\n");
    return 0;
  }
  const rlx::Tensor yc = run_on("cuda", g, xv);
  double max_diff = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    max_diff = std::max(max_diff, std::fabs(double(yc.data<float>()[i]) - double(p[i])));
  // Both sides compute in f32; the matmul may sum in another order.
  const bool ok = max_diff <= 1e-5;
  std::printf("cuda %s cpu (max |diff| = %.3g)\n", ok ? "matches" : "DIFFERS FROM", max_diff);
  return ok ? 0 : 1;
} catch (const rlx::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
