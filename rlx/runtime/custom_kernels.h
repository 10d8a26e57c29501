// Public registry for user-defined ops ("custom kernels"). A custom op is a
// name with shape/dtype inference (define_custom_op); kernels are then
// registered for it per backend and dtype signature:
//
//   rlx::define_custom_op({"sq_relu", 1, 1, infer});
//   rlx::register_custom_cpu_kernel("sq_relu", {F32, F32}, cpu_fn);
//   if (rlx::custom_cuda_kernels_available())
//     rlx::register_custom_cuda_kernel("sq_relu", {F32, F32}, CudaSourceKernel{src, "sq_relu", ...});
//   auto y = rlx::custom("sq_relu", {x}, {{"scale", 0.5}});
//
// CUDA kernels come either as a precompiled launcher (your nvcc-built code)
// or as CUDA C++ source that NVRTC compiles at first use for the device's
// compute capability; compiled code is cached on disk under
// $XDG_CACHE_HOME/rlx/nvrtc (default ~/.cache; RLX_NVRTC_CACHE=0 turns it off).
// Either way the kernel runs as one thunk of the CUDA schedule, so it is
// captured into CUDA graphs like the built-ins. See docs/custom_ops.md.
//
// This header needs no CUDA headers: streams are the opaque CUstream_st*
// (the type cudaStream_t names), so CPU-only users can include it.
// Registration is thread-safe; a later registration with the same op name and
// signature replaces the earlier one for programs compiled afterwards (do not
// re-register while executables that use the op are running).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/ir/custom_op.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace rlx {

// --- The op ---------------------------------------------------------------

// Registers (or replaces) the op's name, input count range and shape/dtype
// inference. `def.infer` throws (e.g. RLX_SHAPE_CHECK) for inputs it rejects;
// the graph builder reports that error with the node.
void define_custom_op(CustomOpDef def);

// Attribute access for kernels and shape functions. Missing keys or values of
// the wrong kind throw InvalidArgument naming the op and the key. Numbers
// accept both int64 and double values.
double custom_attr_number(const CustomAttrs& attrs, const std::string& key);
double custom_attr_number(const CustomAttrs& attrs, const std::string& key, double fallback);
int64_t custom_attr_int(const CustomAttrs& attrs, const std::string& key);
int64_t custom_attr_int(const CustomAttrs& attrs, const std::string& key, int64_t fallback);
std::string custom_attr_string(const CustomAttrs& attrs, const std::string& key);

// --- Kernels --------------------------------------------------------------
// A signature lists each input's dtype, then the output's; kAnyDType matches
// any dtype. The op must be defined first and the signature's input count
// must lie in the op's range. `description` shows in the dispatch report
// (RLX_DISPATCH_REPORT=1); empty gives "custom <op> (<kind>)".

// CPU: cpu::CpuKernel reads inputs and writes the output through
// cpu::KernelArgs (raw pointers, dims, attrs<CustomAttrs>(), f32 staging for
// f16/bf16 via in_f32/out_f32).
void register_custom_cpu_kernel(const std::string& op, std::vector<DType> signature, cpu::CpuKernel kernel,
                                std::string description = {});

// What a CUDA kernel sees: device pointers with their dims and dtypes (dense,
// row-major), the node's attributes, the device index. Fixed for the life of
// a compiled program (one per shape binding).
struct CudaTensorRef {
  void* data = nullptr;  // device memory; inputs must not be written
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

struct CudaKernelArgs {
  std::vector<CudaTensorRef> inputs;
  CudaTensorRef output;
  CustomAttrs attrs;  // op name and scalar attributes
  int device = 0;
  int cc_major = 0, cc_minor = 0;  // the device's compute capability
  std::string where;               // "node %3 (Custom 'y')", for error messages
};

// (a) Precompiled: launches its kernel(s) on `stream` and does nothing else
// (no synchronization, allocation or host reads of device data), because it
// runs during CUDA-graph capture. rlx checks the launch afterwards.
using CudaLauncher = std::function<void(const CudaKernelArgs& args, CUstream_st* stream)>;

struct CudaLaunchConfig {
  std::array<unsigned, 3> grid{1, 1, 1};  // a zero grid dimension means "nothing to launch"
  std::array<unsigned, 3> block{1, 1, 1};
  size_t shared_bytes = 0;  // dynamic shared memory; above 48 KiB rlx opts the kernel in
};

// Scalars passed by value after the tensor pointers; the type must match the
// kernel's parameter (int32_t ↔ int, int64_t ↔ long long, float, double).
using CudaKernelParam = std::variant<int32_t, int64_t, float, double>;

// (b) Source: the kernel is `entry`, declared `extern "C" __global__` (or a
// name expression such as "my_kernel<float>" for a template), with parameters
//   (const T* in0, ..., const T* inN-1, T* out, <params(args)...>).
// NVRTC compiles it at first use for sm_<major><minor> of the device, with
// `options` added (e.g. "-DTILE=64"); errors are thrown with the NVRTC log.
struct CudaSourceKernel {
  std::string source;
  std::string entry;
  std::vector<std::string> options;
  std::function<CudaLaunchConfig(const CudaKernelArgs&)> launch_config;         // required
  std::function<std::vector<CudaKernelParam>(const CudaKernelArgs&)> params;  // optional
};

// False when rlx was built without CUDA (RLX_BUILD_CUDA=OFF); then the two
// functions below throw Unsupported. True does not imply a GPU is present:
// registration works without one and the kernels are used by "cuda" sessions.
bool custom_cuda_kernels_available();
void register_custom_cuda_kernel(const std::string& op, std::vector<DType> signature, CudaLauncher launcher,
                                 std::string description = {});
void register_custom_cuda_kernel(const std::string& op, std::vector<DType> signature, CudaSourceKernel kernel,
                                 std::string description = {});

}  // namespace rlx
