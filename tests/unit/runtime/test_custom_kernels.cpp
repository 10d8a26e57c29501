// The public custom-kernel registry on the CPU backend: defining an op,
// registering kernels, errors for bad registrations and bad graphs, results
// against a float64 reference, and re-registration. Op names are unique to
// this file because the registry is process-wide.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "rlx/ir/builder.h"
#include "rlx/runtime/custom_kernels.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

using namespace rlx;

namespace {

using rlx::test::error_of;

// y = scale · relu(x + b)², b broadcast over x's last dim.
TensorType infer_bias_sq_relu(const std::vector<TensorType>& in, const CustomAttrs&) {
  RLX_SHAPE_CHECK(in[1].rank() == 1 && in[1].shape[0] == in[0].shape.back(), "b must be [",
                  in[0].shape.back().to_string(), "], got ", in[1].to_string());
  return in[0];
}

void cpu_bias_sq_relu(cpu::KernelArgs& a) {
  const float scale = static_cast<float>(custom_attr_number(a.attrs<CustomAttrs>(), "scale"));
  const float* x = a.in_f32(0);
  const float* b = a.in_f32(1);
  float* y = a.out_f32();
  const int64_t n = a.out_numel(), cols = a.in_dims(1)[0];
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::max(x[i] + b[i % cols], 0.0f);
    y[i] = scale * v * v;
  }
}

void define_bias_sq_relu() {
  static const bool once = [] {
    define_custom_op({"ck_bias_sq_relu", 2, 2, infer_bias_sq_relu});
    register_custom_cpu_kernel("ck_bias_sq_relu", {DType::F32, DType::F32, DType::F32}, cpu_bias_sq_relu);
    return true;
  }();
  (void)once;
}

// x [B, 5] → y = bias_sq_relu(x, b, scale)
Graph bias_sq_relu_graph(DType dt, double scale) {
  Graph g;
  auto x = input(g, "x", dt, {"B", 5});
  auto b = param(g, "b", dt, {5});
  output("y", custom("ck_bias_sq_relu", {x, b}, {{"scale", scale}}));
  return g;
}

Tensor random_tensor(std::mt19937& rng, std::vector<int64_t> dims) {
  Tensor t = Tensor::empty(DType::F32, dims);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// A one-input op whose CPU kernel multiplies by `factor`.
void define_times(const std::string& name) {
  define_custom_op({name, 1, 1, [](const std::vector<TensorType>& in, const CustomAttrs&) { return in[0]; }});
}
cpu::CpuKernel times(float factor) {
  return [factor](cpu::KernelArgs& a) {
    for (int64_t i = 0; i < a.out_numel(); ++i) a.out<float>()[i] = factor * a.in<float>(0)[i];
  };
}
float run_scalar_graph(const std::string& op, float x) {
  Graph g;
  output("y", custom(op, {input(g, "x", DType::F32, {1})}));
  Session s("cpu");
  return s.compile(g)->run({Tensor::from(std::vector<float>{x}, {1})})[0].data<float>()[0];
}

}  // namespace

TEST(CustomKernels, GraphMatchesFloat64ReferenceAcrossBatchSizes) {
  define_bias_sq_relu();
  std::mt19937 rng(11);
  Session s("cpu");
  auto exe = s.compile(bias_sq_relu_graph(DType::F32, 0.75));
  const Tensor b = random_tensor(rng, {5});
  exe->set_param("b", b);
  for (int64_t B : {1, 3, 8}) {
    const Tensor x = random_tensor(rng, {B, 5});
    const Tensor y = exe->run({x})[0];
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{B, 5}));
    int positive = 0;
    for (int64_t i = 0; i < B * 5; ++i) {
      const double v = std::max(0.0, double(x.data<float>()[i]) + double(b.data<float>()[i % 5]));
      const double ref = 0.75 * v * v;
      positive += ref > 0;
      EXPECT_NEAR(y.data<float>()[i], ref, 1e-6 + 1e-6 * ref) << "B=" << B << " i=" << i;
    }
    if (B == 8) {
      EXPECT_GT(positive, 5) << "inputs should exercise both sides of the ReLU";
    }
  }
  EXPECT_NE(exe->dispatch_report().find("custom ck_bias_sq_relu (cpu)"), std::string::npos) << exe->dispatch_report();
}

TEST(CustomKernels, F32KernelServesHalfPrecisionPolicyThroughCasts) {
  define_bias_sq_relu();
  std::mt19937 rng(5);
  Session s("cpu");
  CompileOptions o;
  o.precision = DType::F16;
  auto exe = s.compile(bias_sq_relu_graph(DType::F32, 2.0), o);
  const Tensor b = random_tensor(rng, {5});
  const Tensor x = random_tensor(rng, {4, 5});
  exe->set_param("b", b);
  const Tensor y = exe->run({x})[0];
  for (int64_t i = 0; i < 20; ++i) {
    const double v = std::max(0.0, double(x.data<float>()[i]) + double(b.data<float>()[i % 5]));
    EXPECT_NEAR(y.data<float>()[i], 2.0 * v * v, 2e-2 * (1.0 + 2.0 * v * v)) << "i=" << i;
  }
}

TEST(CustomKernels, ShapeInferenceErrorsNameTheNodeAndTheProblem) {
  define_bias_sq_relu();
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", 5});
  auto b4 = param(g, "b4", DType::F32, {4});
  std::string msg = error_of([&] { custom("ck_bias_sq_relu", {x, b4}); });
  EXPECT_NE(msg.find("Custom"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b must be [5], got f32[4]"), std::string::npos) << msg;
  msg = error_of([&] { custom("ck_bias_sq_relu", {x}); });
  EXPECT_NE(msg.find("expects 2 inputs, got 1"), std::string::npos) << msg;
}

TEST(CustomKernels, UnknownOpNamesAreClearErrors) {
  Graph g;
  auto x = input(g, "x", DType::F32, {2});
  std::string msg = error_of([&] { custom("ck_never_defined", {x}); });
  EXPECT_NE(msg.find("custom op 'ck_never_defined' is not registered"), std::string::npos) << msg;
  msg = error_of([] { register_custom_cpu_kernel("ck_never_defined", {DType::F32, DType::F32}, times(1)); });
  EXPECT_NE(msg.find("custom op 'ck_never_defined' is not defined; call define_custom_op first"), std::string::npos)
      << msg;
}

TEST(CustomKernels, BadRegistrationsAreRejected) {
  define_times("ck_times_bad");
  std::string msg = error_of([] { register_custom_cpu_kernel("ck_times_bad", {DType::F32, DType::F32, DType::F32}, times(1)); });
  EXPECT_NE(msg.find("has 2 input(s); the op takes 1"), std::string::npos) << msg;
  msg = error_of([] { register_custom_cpu_kernel("ck_times_bad", {}, times(1)); });
  EXPECT_NE(msg.find("empty dtype signature"), std::string::npos) << msg;
  msg = error_of([] { register_custom_cpu_kernel("ck_times_bad", {DType::F32, DType::F32}, cpu::CpuKernel{}); });
  EXPECT_NE(msg.find("empty kernel function"), std::string::npos) << msg;
  msg = error_of([] { define_custom_op({"ck_no_inputs", 0, 0, [](const std::vector<TensorType>&, const CustomAttrs&) { return TensorType{}; }}); });
  EXPECT_NE(msg.find("at least one input"), std::string::npos) << msg;
  msg = error_of([] { define_custom_op({"ck_no_infer", 1, 1, nullptr}); });
  EXPECT_NE(msg.find("no shape inference function"), std::string::npos) << msg;
}

TEST(CustomKernels, MissingKernelForADtypeFailsCompileNamingTheSignature) {
  define_bias_sq_relu();
  Session s("cpu");
  const std::string msg = error_of([&] { s.compile(bias_sq_relu_graph(DType::F64, 1.0)); });
  EXPECT_NE(msg.find("ck_bias_sq_relu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(f64,f64)->f64"), std::string::npos) << msg;
}

TEST(CustomKernels, ReRegistrationReplacesTheKernelForLaterCompiles) {
  define_times("ck_times");
  register_custom_cpu_kernel("ck_times", {DType::F32, DType::F32}, times(2.0f));
  EXPECT_EQ(run_scalar_graph("ck_times", 1.5f), 3.0f);
  register_custom_cpu_kernel("ck_times", {DType::F32, DType::F32}, times(3.0f));
  EXPECT_EQ(run_scalar_graph("ck_times", 1.5f), 4.5f);
  // A wildcard signature is used only when no exact one matches.
  register_custom_cpu_kernel("ck_times", {kAnyDType, kAnyDType}, times(10.0f));
  EXPECT_EQ(run_scalar_graph("ck_times", 1.5f), 4.5f);
}

TEST(CustomKernels, AttributeAccessorsCheckPresenceAndKind) {
  CustomAttrs a{"ck_attrs", {{"n", int64_t{4}}, {"s", 0.5}, {"mode", std::string("fast")}}};
  EXPECT_EQ(custom_attr_int(a, "n"), 4);
  EXPECT_EQ(custom_attr_number(a, "n"), 4.0);
  EXPECT_EQ(custom_attr_number(a, "s"), 0.5);
  EXPECT_EQ(custom_attr_string(a, "mode"), "fast");
  EXPECT_EQ(custom_attr_number(a, "absent", 2.5), 2.5);
  EXPECT_EQ(custom_attr_int(a, "absent", 7), 7);
  EXPECT_EQ(error_of([&] { custom_attr_number(a, "absent"); }), "custom op 'ck_attrs': attribute 'absent' is missing");
  EXPECT_EQ(error_of([&] { custom_attr_int(a, "s"); }), "custom op 'ck_attrs': attribute 's' is a float, expected an integer");
  EXPECT_EQ(error_of([&] { custom_attr_number(a, "mode"); }),
            "custom op 'ck_attrs': attribute 'mode' is a string, expected a number");
  EXPECT_EQ(error_of([&] { custom_attr_string(a, "n"); }), "custom op 'ck_attrs': attribute 'n' is a number, expected a string");
}

TEST(CustomKernels, CudaRegistrationIsCheckedOrRefusedWithoutCuda) {
  define_times("ck_times_cuda");
  CudaLauncher noop = [](const CudaKernelArgs&, CUstream_st*) {};
  if (!custom_cuda_kernels_available()) {
    const std::string msg = error_of([&] { register_custom_cuda_kernel("ck_times_cuda", {DType::F32, DType::F32}, noop); });
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
    return;
  }
  std::string msg = error_of([&] { register_custom_cuda_kernel("ck_not_defined_cuda", {DType::F32, DType::F32}, noop); });
  EXPECT_NE(msg.find("is not defined"), std::string::npos) << msg;
  msg = error_of([&] { register_custom_cuda_kernel("ck_times_cuda", {DType::F32, DType::F32}, CudaSourceKernel{}); });
  EXPECT_NE(msg.find("empty CUDA source"), std::string::npos) << msg;
  CudaSourceKernel no_config;
  no_config.source = "extern \"C\" __global__ void k(const float*, float*) {}";
  no_config.entry = "k";
  msg = error_of([&] { register_custom_cuda_kernel("ck_times_cuda", {DType::F32, DType::F32}, no_config); });
  EXPECT_NE(msg.find("no launch_config function"), std::string::npos) << msg;
  msg = error_of([&] { register_custom_cuda_kernel("ck_times_cuda", {DType::F32, DType::F32}, CudaLauncher{}); });
  EXPECT_NE(msg.find("empty launcher"), std::string::npos) << msg;
}
