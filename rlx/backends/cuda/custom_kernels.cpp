// Lowerings for custom ops. Everything a launch needs — pointers, dims, the
// loaded NVRTC kernel, launch configuration, the kernel's argument array — is
// resolved here, at program compile time; the thunk only launches, so it is
// captured into the CUDA graph like any built-in kernel.
#include "rlx/backends/cuda/custom_kernels.h"

#include <memory>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/nvrtc.h"

namespace rlx::cuda {
namespace {

CudaKernelArgs make_args(LowerCtx& ctx, NodeId id) {
  const Node& n = ctx.node(id);
  CudaKernelArgs a;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    a.inputs.push_back(CudaTensorRef{ctx.in_ptr(id, i), ctx.type(n.inputs[i]).dtype, ctx.dims(n.inputs[i])});
  a.output = CudaTensorRef{ctx.ptr(id), n.type.dtype, ctx.dims(id)};
  a.attrs = n.attr<CustomAttrs>();
  a.device = ctx.props.index;
  a.cc_major = ctx.props.cc_major;
  a.cc_minor = ctx.props.cc_minor;
  a.where = ctx.graph.describe(id);
  return a;
}

// One source-kernel launch with its argument array: argv[i] points at the
// i-th kernel parameter (tensor pointers first, then the scalar params).
struct SourceLaunch {
  const void* func = nullptr;
  dim3 grid, block;
  size_t shared_bytes = 0;
  std::vector<void*> pointers;
  std::vector<CudaKernelParam> params;
  std::vector<void*> argv;
  std::string label;  // "custom op 'x' (kernel 'k')" for launch errors
};

size_t param_size(const CudaKernelParam& p) {
  return std::visit([](const auto& v) { return sizeof(v); }, p);
}

// Compares the kernel's parameter list (sizes, from the loaded image) with what
// rlx passes, so a mismatch is a clear error instead of garbage on the device.
void check_kernel_params(const SourceLaunch& l, const CudaKernelArgs& args, const std::string& entry) {
  std::vector<size_t> sizes(l.pointers.size(), sizeof(void*));
  for (const auto& p : l.params) sizes.push_back(param_size(p));
  const std::string passed = str(args.inputs.size(), " input pointer(s), the output pointer and ", l.params.size(),
                                 " scalar param(s)");
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    const cudaError_t err = cudaFuncGetParamInfo(l.func, i, &offset, &size);
    if (err != cudaSuccess) {
      cudaGetLastError();  // an expected failure past the last parameter; keep the error state clean
      if (err != cudaErrorInvalidValue) return;  // the driver cannot tell; skip the check
      RLX_CHECK(i == sizes.size(), args.where, ": custom kernel '", entry, "' takes ", i, " parameter(s) but rlx passes ",
                sizes.size(), " (", passed, ")");
      return;
    }
    RLX_CHECK(i < sizes.size(), args.where, ": custom kernel '", entry, "' takes more than the ", sizes.size(),
              " parameter(s) rlx passes (", passed, ")");
    RLX_CHECK(size == sizes[i], args.where, ": custom kernel '", entry, "' parameter ", i, " is ", size,
              " bytes but rlx passes ", sizes[i], " (", passed, ")");
  }
}

void check_config(const CudaLaunchConfig& c, const CudaKernelArgs& args, const DeviceProps& props) {
  const uint64_t threads = uint64_t{c.block[0]} * c.block[1] * c.block[2];
  RLX_CHECK(threads >= 1 && threads <= 1024, args.where, ": custom kernel block (", c.block[0], ",", c.block[1], ",",
            c.block[2], ") must have 1 to 1024 threads");
  RLX_CHECK(c.grid[1] <= 65535 && c.grid[2] <= 65535, args.where, ": custom kernel grid (", c.grid[0], ",", c.grid[1],
            ",", c.grid[2], ") exceeds 65535 in y or z");
  RLX_CHECK(c.shared_bytes <= props.smem_per_block_optin, args.where, ": custom kernel asks for ", c.shared_bytes,
            " bytes of shared memory; the device allows ", props.smem_per_block_optin, " per block");
}

std::string default_description(const std::string& op, const std::string& kind, const std::string& given) {
  return given.empty() ? str("custom ", op, " (", kind, ")") : given;
}

}  // namespace

void register_custom_launcher(const std::string& op, std::vector<DType> signature, CudaLauncher launcher,
                              std::string description) {
  RLX_CHECK(static_cast<bool>(launcher), "register_custom_cuda_kernel('", op, "'): empty launcher");
  auto fn = std::make_shared<const CudaLauncher>(std::move(launcher));
  register_cuda_lowering(
      OpKind::Custom, std::move(signature),
      [fn](LowerCtx& ctx, NodeId id) {
        auto args = std::make_shared<const CudaKernelArgs>(make_args(ctx, id));
        auto label = std::make_shared<const std::string>(str("custom op '", args->attrs.name, "' (launcher)"));
        ctx.add(id, {}, [fn, args, label](cudaStream_t s) {
          (*fn)(*args, s);
          RLX_CUDA_CHECK_LAUNCH(label->c_str());
        });
      },
      default_description(op, "cuda launcher", description), false, op);
}

void register_custom_source(const std::string& op, std::vector<DType> signature, CudaSourceKernel kernel,
                            std::string description) {
  RLX_CHECK(!kernel.source.empty(), "register_custom_cuda_kernel('", op, "'): empty CUDA source");
  RLX_CHECK(!kernel.entry.empty(), "register_custom_cuda_kernel('", op, "'): no kernel entry name");
  RLX_CHECK(static_cast<bool>(kernel.launch_config), "register_custom_cuda_kernel('", op,
            "'): no launch_config function");
  auto k = std::make_shared<const CudaSourceKernel>(std::move(kernel));
  const std::string desc = default_description(op, str("nvrtc ", k->entry), description);
  register_cuda_lowering(
      OpKind::Custom, std::move(signature),
      [k, op](LowerCtx& ctx, NodeId id) {
        const CudaKernelArgs args = make_args(ctx, id);
        const NvrtcRequest req{op, k->source, k->entry, k->options, ctx.props.cc_major, ctx.props.cc_minor};
        auto l = std::make_shared<SourceLaunch>();
        l->func = nvrtc_kernel(req, ctx.props.index);
        l->label = str("custom op '", op, "' (kernel '", k->entry, "')");
        const CudaLaunchConfig cfg = k->launch_config(args);
        check_config(cfg, args, ctx.props);
        for (const auto& in : args.inputs) l->pointers.push_back(in.data);
        l->pointers.push_back(args.output.data);
        if (k->params) l->params = k->params(args);
        check_kernel_params(*l, args, k->entry);
        for (auto& p : l->pointers) l->argv.push_back(&p);
        for (auto& p : l->params) std::visit([&](auto& v) { l->argv.push_back(&v); }, p);
        if (cfg.grid[0] == 0 || cfg.grid[1] == 0 || cfg.grid[2] == 0) return;  // empty output: nothing to launch
        if (cfg.shared_bytes > 48 * 1024) {
          DeviceGuard guard(ctx.props.index);
          RLX_CUDA_CHECK(cudaFuncSetAttribute(l->func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(cfg.shared_bytes)));
        }
        l->grid = dim3(cfg.grid[0], cfg.grid[1], cfg.grid[2]);
        l->block = dim3(cfg.block[0], cfg.block[1], cfg.block[2]);
        l->shared_bytes = cfg.shared_bytes;
        ctx.add(id, {}, [l](cudaStream_t s) {
          const cudaError_t err = cudaLaunchKernel(l->func, l->grid, l->block, l->argv.data(), l->shared_bytes, s);
          if (err != cudaSuccess) throw_launch_error(err, l->label.c_str(), __FILE__, __LINE__);
        });
      },
      desc, false, op);
}

}  // namespace rlx::cuda
