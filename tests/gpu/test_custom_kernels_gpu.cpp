// Custom CUDA kernels (rlx/runtime/custom_kernels.h). The Nvrtc.* tests need
// only NVRTC (no GPU) and run everywhere the CUDA backend is built: the disk
// cache is written, re-read, keyed on everything, rebuilt when corrupt, and
// off under RLX_NVRTC_CACHE=0; compile errors carry the NVRTC log. The
// CustomKernelsGpu.* tests need a device: the NVRTC and precompiled-launcher
// kernels match the CPU kernel, inside CUDA graphs across runs with changing
// inputs and shape buckets, and bad kernels fail with clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/nvrtc.h"
#include "rlx/core/env.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/custom_kernels.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

// tests/gpu/custom_launcher.cu
void launch_bias_sq_relu_precompiled(const rlx::CudaKernelArgs& a, CUstream_st* stream);

using namespace rlx;
namespace fs = std::filesystem;

namespace {

using rlx::test::error_of;

// Sets an environment variable for the guard's lifetime.
class EnvGuard {
 public:
  EnvGuard(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~EnvGuard() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// A fresh cache home per test, removed afterwards.
struct TempCacheHome {
  fs::path dir;
  std::unique_ptr<EnvGuard> env;
  TempCacheHome() {
    std::string tmpl = (fs::temp_directory_path() / "rlx-nvrtc-test-XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    env = std::make_unique<EnvGuard>("XDG_CACHE_HOME", dir.string());
  }
  ~TempCacheHome() {
    env.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

constexpr const char* kBiasSqReluSource = R"(
extern "C" __global__ void bias_sq_relu(const float* x, const float* b, float* y,
                                        long long n, int cols, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const float v = fmaxf(x[i] + b[i % cols], 0.0f);
    y[i] = scale * v * v;
  }
}
)";

cuda::NvrtcRequest request(const std::string& nonce) {
  cuda::NvrtcRequest r;
  r.op = "ckg_cache";
  r.source = str("// ", nonce, "\n", kBiasSqReluSource);  // unique per test: a fresh cache key
  r.entry = "bias_sq_relu";
  r.cc_major = 9;
  r.cc_minor = 0;
  return r;
}

std::string unique_nonce(const char* test) { return str(test, "-", getpid(), "-", std::random_device{}()); }

// --- ops shared by the GPU tests ---

TensorType infer_bias_sq_relu(const std::vector<TensorType>& in, const CustomAttrs&) {
  RLX_SHAPE_CHECK(in[1].rank() == 1 && in[1].shape[0] == in[0].shape.back(), "b must match x's last dim");
  return in[0];
}

void cpu_bias_sq_relu(cpu::KernelArgs& a) {
  const float scale = static_cast<float>(custom_attr_number(a.attrs<CustomAttrs>(), "scale", 1.0));
  const int64_t n = a.out_numel(), cols = a.in_dims(1)[0];
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fmax(a.in<float>(0)[i] + a.in<float>(1)[i % cols], 0.0f);
    a.out<float>()[i] = scale * v * v;
  }
}

CudaSourceKernel source_kernel(const std::string& source, const std::string& entry) {
  CudaSourceKernel k;
  k.source = source;
  k.entry = entry;
  k.launch_config = [](const CudaKernelArgs& a) {
    CudaLaunchConfig c;
    c.grid = {static_cast<unsigned>(std::min<int64_t>((a.output.numel() + 255) / 256, 1024)), 1, 1};
    c.block = {256, 1, 1};
    return c;
  };
  k.params = [](const CudaKernelArgs& a) {
    return std::vector<CudaKernelParam>{a.output.numel(), static_cast<int32_t>(a.inputs[1].dims[0]),
                                        static_cast<float>(custom_attr_number(a.attrs, "scale", 1.0))};
  };
  return k;
}

// "ckg_nvrtc" (CUDA kernel from source) and "ckg_launcher" (precompiled),
// both with the same CPU kernel.
void define_ops() {
  static const bool once = [] {
    const std::vector<DType> sig = {DType::F32, DType::F32, DType::F32};
    for (const char* name : {"ckg_nvrtc", "ckg_launcher"}) {
      define_custom_op({name, 2, 2, infer_bias_sq_relu});
      register_custom_cpu_kernel(name, sig, cpu_bias_sq_relu);
    }
    register_custom_cuda_kernel("ckg_nvrtc", sig, source_kernel(kBiasSqReluSource, "bias_sq_relu"));
    register_custom_cuda_kernel("ckg_launcher", sig, CudaLauncher(launch_bias_sq_relu_precompiled));
    return true;
  }();
  (void)once;
}

// y = gelu(op(x · W, b)): the custom op between two built-ins, so ordering
// inside the captured graph matters.
Graph sandwich(const std::string& op) {
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", 64});
  auto w = param(g, "w", DType::F32, {64, 96});
  auto b = param(g, "b", DType::F32, {96});
  output("y", gelu(custom(op, {matmul(x, w), b}, {{"scale", 0.25}})));
  return g;
}

Tensor random_tensor(std::mt19937& rng, std::vector<int64_t> dims, float scale = 1.0f) {
  Tensor t = Tensor::empty(DType::F32, dims);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

std::shared_ptr<Executable> compile_with_weights(Session& s, const Graph& g, bool graphs, const Tensor& w,
                                                 const Tensor& b) {
  CompileOptions o;
  o.cuda_graphs = graphs;
  auto exe = s.compile(g, o);
  exe->set_param("w", w);
  exe->set_param("b", b);
  return exe;
}

// Max |a - b| / (1 + |b|), with the first offending index in `where`.
double max_rel_diff(const Tensor& a, const Tensor& b, int64_t* where) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(double(a.data<float>()[i]) - double(b.data<float>()[i])) / (1.0 + std::fabs(double(b.data<float>()[i])));
    if (d > worst) worst = d, *where = i;
  }
  return worst;
}

bool have_gpu() {
  register_builtin_backends();
  return backend_available("cuda");
}

}  // namespace

// ---------------------------------------------------------------- NVRTC only

TEST(Nvrtc, DiskCacheIsWrittenThenReused) {
  TempCacheHome home;
  EnvGuard on("RLX_NVRTC_CACHE", "1");
  const auto req = request(unique_nonce("reuse"));
  const std::string path = cuda::nvrtc_cache_path(req);
  ASSERT_EQ(path.rfind((home.dir / "rlx" / "nvrtc").string() + "/", 0), 0u) << path;
  ASSERT_EQ(fs::path(path).extension(), ".cubin") << path;

  const auto s0 = cuda::nvrtc_stats();
  const auto first = cuda::nvrtc_compile(req);
  const auto s1 = cuda::nvrtc_stats();
  EXPECT_FALSE(first.from_disk);
  EXPECT_EQ(first.arch, "sm_90");
  EXPECT_EQ(first.lowered_name, "bias_sq_relu");
  EXPECT_GT(first.cubin.size(), 0u);
  EXPECT_EQ(s1.compiles, s0.compiles + 1);
  EXPECT_EQ(s1.disk_writes, s0.disk_writes + 1);
  ASSERT_TRUE(fs::exists(path)) << path;

  const auto second = cuda::nvrtc_compile(req);
  const auto s2 = cuda::nvrtc_stats();
  EXPECT_TRUE(second.from_disk);
  EXPECT_EQ(s2.disk_hits, s1.disk_hits + 1);
  EXPECT_EQ(s2.compiles, s1.compiles) << "the second compile must read the cubin, not run NVRTC";
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.lowered_name, first.lowered_name);
}

TEST(Nvrtc, CorruptOrTruncatedCacheEntriesAreIgnoredAndRebuilt) {
  TempCacheHome home;
  EnvGuard on("RLX_NVRTC_CACHE", "1");
  const auto req = request(unique_nonce("corrupt"));
  const auto good = cuda::nvrtc_compile(req);
  const std::string path = cuda::nvrtc_cache_path(req);
  const auto size = fs::file_size(path);

  for (int variant = 0; variant < 3; ++variant) {
    if (variant == 0) {  // flip one byte inside the cubin
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(size / 2));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(static_cast<std::streamoff>(size / 2));
      f.write(&c, 1);
    } else if (variant == 1) {  // cut it short
      fs::resize_file(path, size / 3);
    } else {  // not a cache file at all
      std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
    }
    const auto s0 = cuda::nvrtc_stats();
    const auto rebuilt = cuda::nvrtc_compile(req);
    const auto s1 = cuda::nvrtc_stats();
    EXPECT_FALSE(rebuilt.from_disk) << "variant " << variant;
    EXPECT_EQ(s1.disk_rejected, s0.disk_rejected + 1) << "variant " << variant;
    EXPECT_EQ(s1.compiles, s0.compiles + 1) << "variant " << variant;
    EXPECT_EQ(rebuilt.cubin, good.cubin) << "variant " << variant;
    EXPECT_EQ(fs::file_size(path), size) << "variant " << variant << ": the entry must be rewritten";
    EXPECT_TRUE(cuda::nvrtc_compile(req).from_disk) << "variant " << variant << ": the rewritten entry must be used";
  }
}

TEST(Nvrtc, CacheKeyCoversSourceEntryOptionsAndArch) {
  TempCacheHome home;
  EnvGuard on("RLX_NVRTC_CACHE", "1");
  const auto base = request("key");
  auto other_source = base, other_entry = base, other_options = base, other_arch = base;
  other_source.source += "\n// changed\n";
  other_entry.entry = "other_kernel";
  other_options.options = {"-DTILE=64"};
  other_arch.cc_minor = 0, other_arch.cc_major = 8;
  const std::string p = cuda::nvrtc_cache_path(base);
  for (const auto* r : {&other_source, &other_entry, &other_options, &other_arch})
    EXPECT_NE(cuda::nvrtc_cache_path(*r), p);
  EXPECT_EQ(cuda::nvrtc_cache_path(request("key")), p) << "the key must be deterministic";
}

TEST(Nvrtc, CacheOffWithKnob) {
  TempCacheHome home;
  EnvGuard off("RLX_NVRTC_CACHE", "0");
  const auto req = request(unique_nonce("off"));
  EXPECT_EQ(cuda::nvrtc_cache_path(req), "");
  const auto s0 = cuda::nvrtc_stats();
  EXPECT_FALSE(cuda::nvrtc_compile(req).from_disk);
  EXPECT_FALSE(cuda::nvrtc_compile(req).from_disk);
  const auto s1 = cuda::nvrtc_stats();
  EXPECT_EQ(s1.compiles, s0.compiles + 2);
  EXPECT_EQ(s1.disk_writes, s0.disk_writes);
  EXPECT_FALSE(fs::exists(home.dir / "rlx")) << "nothing may be written with RLX_NVRTC_CACHE=0";
}

TEST(Nvrtc, CompileErrorsCarryTheOpNameAndTheNvrtcLog) {
  TempCacheHome home;
  cuda::NvrtcRequest r = request("syntax");
  r.op = "ckg_broken";
  r.source = "extern \"C\" __global__ void broken(float* y) {\n  y[0] = 1.0f\n  undeclared_thing(y);\n}\n";
  r.entry = "broken";
  const std::string msg = error_of([&] { cuda::nvrtc_compile(r); });
  EXPECT_NE(msg.find("custom op 'ckg_broken': NVRTC could not compile kernel 'broken' for sm_90"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ckg_broken.cu(3): error"), std::string::npos) << "the NVRTC log must follow:\n" << msg;
  EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(cuda::nvrtc_cache_path(r))) << "a failed compile must not be cached";

  r.source = kBiasSqReluSource;
  r.entry = "no_such_kernel";
  const std::string msg2 = error_of([&] { cuda::nvrtc_compile(r); });
  EXPECT_NE(msg2.find("custom op 'ckg_broken'"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("no_such_kernel"), std::string::npos) << msg2;
}

TEST(Nvrtc, TemplateEntriesAreNameExpressions) {
  cuda::NvrtcRequest r = request("template");
  r.source = "template <typename T> __global__ void twice(const T* x, T* y, long long n) {\n"
             "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
             "  if (i < n) y[i] = x[i] + x[i];\n}\n";
  r.entry = "twice<float>";
  const auto f = cuda::nvrtc_compile(r, false);
  r.entry = "twice<double>";
  const auto d = cuda::nvrtc_compile(r, false);
  EXPECT_EQ(f.lowered_name.rfind("_Z", 0), 0u) << f.lowered_name;  // a mangled symbol
  EXPECT_NE(f.lowered_name, d.lowered_name);
}

TEST(Nvrtc, UnsupportedArchIsAClearError) {
  cuda::NvrtcRequest r = request("arch");
  r.cc_major = 1;
  r.cc_minor = 0;
  const std::string msg = error_of([&] { cuda::nvrtc_compile(r, false); });
  EXPECT_NE(msg.find("cannot compile for sm_10"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- on a GPU

TEST(CustomKernelsGpu, NvrtcAndPrecompiledLauncherMatchTheCpuKernel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  define_ops();
  std::mt19937 rng(3);
  const Tensor w = random_tensor(rng, {64, 96}, 0.2f), b = random_tensor(rng, {96}, 0.5f);
  Session cpu("cpu"), gpu("cuda");
  for (const char* op : {"ckg_nvrtc", "ckg_launcher"}) {
    const Graph g = sandwich(op);
    auto on_cpu = compile_with_weights(cpu, g, true, w, b);
    auto on_gpu = compile_with_weights(gpu, g, true, w, b);
    for (int64_t B : {1, 37, 300}) {  // 300·96 elements: more than one block of 256
      const Tensor x = random_tensor(rng, {B, 64});
      const Tensor ref = on_cpu->run({x})[0], got = on_gpu->run({x})[0];
      ASSERT_EQ(got.shape(), ref.shape());
      int64_t at = 0;
      const double d = max_rel_diff(got, ref, &at);
      // f32 throughout; the matmul's summation order differs (TF32 is off by default).
      EXPECT_LE(d, 1e-5) << op << " B=" << B << ": element " << at << " is " << got.data<float>()[at] << ", cpu "
                         << ref.data<float>()[at];
    }
    const std::string report = on_gpu->dispatch_report();
    EXPECT_NE(report.find(std::string(op) == "ckg_nvrtc" ? "custom ckg_nvrtc (nvrtc bias_sq_relu)"
                                                         : "custom ckg_launcher (cuda launcher)"),
              std::string::npos)
        << report;
  }
}

TEST(CustomKernelsGpu, InsideCudaGraphsAcrossRunsWithChangingInputs) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  define_ops();
  std::mt19937 rng(9);
  const Tensor w = random_tensor(rng, {64, 96}, 0.2f), b = random_tensor(rng, {96}, 0.5f);
  Session gpu("cuda"), cpu("cpu");
  for (const char* op : {"ckg_nvrtc", "ckg_launcher"}) {
    const Graph g = sandwich(op);
    auto with = compile_with_weights(gpu, g, true, w, b);
    auto without = compile_with_weights(gpu, g, false, w, b);
    auto ref_exe = compile_with_weights(cpu, g, true, w, b);
    for (int run = 0; run < 12; ++run) {
      const int64_t B = run % 3 == 0 ? 5 : 16;  // two shape buckets, interleaved
      const Tensor x = random_tensor(rng, {B, 64});
      const Tensor a = with->run({x})[0], c = without->run({x})[0], ref = ref_exe->run({x})[0];
      ASSERT_EQ(std::memcmp(a.raw(), c.raw(), a.nbytes()), 0)
          << op << " run " << run << " (B=" << B << "): CUDA-graph replay differs from direct launches";
      int64_t at = 0;
      EXPECT_LE(max_rel_diff(a, ref, &at), 1e-5) << op << " run " << run << ": element " << at
                                                 << " is stale or wrong (" << a.data<float>()[at] << " vs cpu "
                                                 << ref.data<float>()[at] << ")";
    }
    EXPECT_EQ(with->cached_specializations(), 2u);
    if (env_bool("RLX_CUDA_GRAPHS")) {
      EXPECT_NE(with->dispatch_report().find("cuda graphs on"), std::string::npos) << with->dispatch_report();
    }
    EXPECT_NE(without->dispatch_report().find("cuda graphs off"), std::string::npos) << without->dispatch_report();
  }
}

TEST(CustomKernelsGpu, KernelIsCompiledOnceThenTheCubinIsReadFromDisk) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  TempCacheHome home;
  EnvGuard on("RLX_NVRTC_CACHE", "1");
  const std::string op = "ckg_cached";
  const std::string source = str("// ", unique_nonce("gpu-cache"), "\n", kBiasSqReluSource);
  define_custom_op({op, 2, 2, infer_bias_sq_relu});
  register_custom_cpu_kernel(op, {DType::F32, DType::F32, DType::F32}, cpu_bias_sq_relu);
  register_custom_cuda_kernel(op, {DType::F32, DType::F32, DType::F32}, source_kernel(source, "bias_sq_relu"));
  std::mt19937 rng(4);
  const Tensor w = random_tensor(rng, {64, 96}, 0.2f), b = random_tensor(rng, {96}, 0.5f);
  Session gpu("cuda");
  const auto s0 = cuda::nvrtc_stats();
  auto exe = compile_with_weights(gpu, sandwich(op), true, w, b);
  exe->run({random_tensor(rng, {4, 64})});
  exe->run({random_tensor(rng, {7, 64})});  // a second program (bucket) reuses the loaded kernel
  const auto s1 = cuda::nvrtc_stats();
  EXPECT_EQ(s1.compiles, s0.compiles + 1) << "one NVRTC compile for the first program, none after";
  EXPECT_EQ(s1.disk_writes, s0.disk_writes + 1);

  const cuda::DeviceProps& props = cuda::device_props(0);  // Session("cuda") is device 0
  const cuda::NvrtcRequest req{op, source, "bias_sq_relu", {}, props.cc_major, props.cc_minor};
  const std::string path = cuda::nvrtc_cache_path(req);
  ASSERT_TRUE(fs::exists(path)) << "the compiled kernel must be cached at " << path;
  EXPECT_TRUE(cuda::nvrtc_compile(req).from_disk) << "a later process (or load) must read " << path;
  EXPECT_EQ(cuda::nvrtc_stats().compiles, s1.compiles);
}

TEST(CustomKernelsGpu, SyntaxErrorFailsTheCompileWithTheNvrtcLog) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string op = "ckg_syntax_error";
  define_custom_op({op, 2, 2, infer_bias_sq_relu});
  std::string bad = kBiasSqReluSource;
  bad.replace(bad.find("fmaxf("), 6, "fmaxf((");  // unbalanced parenthesis
  register_custom_cuda_kernel(op, {DType::F32, DType::F32, DType::F32}, source_kernel(bad, "bias_sq_relu"));
  Session gpu("cuda");
  std::mt19937 rng(1);
  const std::string msg = error_of([&] {
    auto exe = compile_with_weights(gpu, sandwich(op), true, random_tensor(rng, {64, 96}), random_tensor(rng, {96}));
    exe->run({random_tensor(rng, {2, 64})});
  });
  EXPECT_NE(msg.find("custom op 'ckg_syntax_error': NVRTC could not compile kernel 'bias_sq_relu'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("ckg_syntax_error.cu("), std::string::npos) << "the NVRTC log must be in the message:\n" << msg;
  EXPECT_NE(msg.find("error"), std::string::npos) << msg;
}

TEST(CustomKernelsGpu, ParameterListMismatchIsAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string op = "ckg_param_mismatch";
  define_custom_op({op, 2, 2, infer_bias_sq_relu});
  // n declared as int while rlx passes an int64 (8 bytes).
  std::string wrong = kBiasSqReluSource;
  wrong.replace(wrong.find("long long n"), 11, "int n");
  register_custom_cuda_kernel(op, {DType::F32, DType::F32, DType::F32}, source_kernel(wrong, "bias_sq_relu"));
  Session gpu("cuda");
  std::mt19937 rng(2);
  const std::string msg = error_of([&] {
    auto exe = compile_with_weights(gpu, sandwich(op), true, random_tensor(rng, {64, 96}), random_tensor(rng, {96}));
    exe->run({random_tensor(rng, {2, 64})});
  });
  EXPECT_NE(msg.find("custom kernel 'bias_sq_relu' parameter 3 is 4 bytes but rlx passes 8"), std::string::npos) << msg;
}
