// The public custom-kernel registry (rlx/runtime/custom_kernels.h). It lives
// with rlx_session, above the backends, because it registers into both; the
// CUDA half is in rlx/backends/cuda/custom_kernels.cpp.
#include "rlx/runtime/custom_kernels.h"

#ifdef RLX_HAVE_CUDA
#include "rlx/backends/cuda/custom_kernels.h"
#endif

namespace rlx {
namespace {

// The op must be defined, and the signature must name a dtype for each input
// (within the op's range) plus the output.
void check_kernel_for(const char* fn, const std::string& op, const std::vector<DType>& signature) {
  RLX_CHECK(has_custom_op(op), fn, "('", op, "'): custom op '", op, "' is not defined; call define_custom_op first");
  const CustomOpDef& def = find_custom_op(op);
  RLX_CHECK(!signature.empty(), fn, "('", op, "'): empty dtype signature (want input dtypes, then the output's)");
  const int n_in = static_cast<int>(signature.size()) - 1;
  RLX_CHECK(n_in >= def.min_inputs && n_in <= def.max_inputs, fn, "('", op, "'): signature ",
            signature_to_string(signature), " has ", n_in, " input(s); the op takes ", def.min_inputs,
            def.min_inputs == def.max_inputs ? std::string() : str(" to ", def.max_inputs));
}

const CustomAttrValue& attr_value(const CustomAttrs& a, const std::string& key) {
  auto it = a.values.find(key);
  RLX_CHECK(it != a.values.end(), "custom op '", a.name, "': attribute '", key, "' is missing");
  return it->second;
}

}  // namespace

void define_custom_op(CustomOpDef def) {
  RLX_CHECK(def.min_inputs >= 1, "define_custom_op('", def.name, "'): an op needs at least one input");
  register_custom_op(std::move(def));
}

double custom_attr_number(const CustomAttrs& a, const std::string& key) {
  const CustomAttrValue& v = attr_value(a, key);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  throw InvalidArgument(str("custom op '", a.name, "': attribute '", key, "' is a string, expected a number"));
}

double custom_attr_number(const CustomAttrs& a, const std::string& key, double fallback) {
  return a.values.count(key) ? custom_attr_number(a, key) : fallback;
}

int64_t custom_attr_int(const CustomAttrs& a, const std::string& key) {
  const CustomAttrValue& v = attr_value(a, key);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  throw InvalidArgument(str("custom op '", a.name, "': attribute '", key, "' is a ",
                            std::holds_alternative<double>(v) ? "float" : "string", ", expected an integer"));
}

int64_t custom_attr_int(const CustomAttrs& a, const std::string& key, int64_t fallback) {
  return a.values.count(key) ? custom_attr_int(a, key) : fallback;
}

std::string custom_attr_string(const CustomAttrs& a, const std::string& key) {
  const CustomAttrValue& v = attr_value(a, key);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw InvalidArgument(str("custom op '", a.name, "': attribute '", key, "' is a number, expected a string"));
}

void register_custom_cpu_kernel(const std::string& op, std::vector<DType> signature, cpu::CpuKernel kernel,
                                std::string description) {
  check_kernel_for("register_custom_cpu_kernel", op, signature);
  RLX_CHECK(static_cast<bool>(kernel), "register_custom_cpu_kernel('", op, "'): empty kernel function");
  if (description.empty()) description = str("custom ", op, " (cpu)");
  cpu::register_cpu_kernel(OpKind::Custom, std::move(signature), std::move(kernel), std::move(description), false, op);
}

#ifdef RLX_HAVE_CUDA

bool custom_cuda_kernels_available() { return true; }

void register_custom_cuda_kernel(const std::string& op, std::vector<DType> signature, CudaLauncher launcher,
                                 std::string description) {
  check_kernel_for("register_custom_cuda_kernel", op, signature);
  cuda::register_custom_launcher(op, std::move(signature), std::move(launcher), std::move(description));
}

void register_custom_cuda_kernel(const std::string& op, std::vector<DType> signature, CudaSourceKernel kernel,
                                 std::string description) {
  check_kernel_for("register_custom_cuda_kernel", op, signature);
  cuda::register_custom_source(op, std::move(signature), std::move(kernel), std::move(description));
}

#else

bool custom_cuda_kernels_available() { return false; }

void register_custom_cuda_kernel(const std::string& op, std::vector<DType>, CudaLauncher, std::string) {
  throw Unsupported(str("register_custom_cuda_kernel('", op, "'): rlx was built without CUDA (RLX_BUILD_CUDA=OFF)"));
}

void register_custom_cuda_kernel(const std::string& op, std::vector<DType>, CudaSourceKernel, std::string) {
  throw Unsupported(str("register_custom_cuda_kernel('", op, "'): rlx was built without CUDA (RLX_BUILD_CUDA=OFF)"));
}

#endif

}  // namespace rlx
