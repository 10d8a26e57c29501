// Fft → cuFFT. Each node gets its own plan, made when the program is
// compiled for its static shape (all rows as one batch, 64-bit sizes) and
// destroyed with the program. The plan's work area is the program's
// workspace, set before every execution, so a captured CUDA graph replays it
// with nothing left for the host to do.
//
// cuFFT computes in f32 and leaves results unnormalized; numpy's `norm` is a
// scale pass after it. Real inputs stored as f16, bf16 or f64 are converted to
// f32 in the workspace first (cuFFT's half-precision transforms take only
// powers of two). A complex-to-real transform overwrites its input, so its
// bins are copied to the workspace first; inputs not 16-byte aligned (a
// narrowed view) are staged the same way.
#include <cufft.h>

#include <cmath>
#include <memory>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/fft.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

const char* cufft_status_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "unknown cuFFT status";
  }
}

#define RLX_CUFFT_CHECK(call)                                                                                   \
  do {                                                                                                          \
    const cufftResult rlx_st_ = (call);                                                                         \
    if (rlx_st_ != CUFFT_SUCCESS) [[unlikely]]                                                                  \
      throw ::rlx::DeviceError(::rlx::str("cuFFT error ", cufft_status_name(rlx_st_), " (", static_cast<int>(rlx_st_), \
                                          ") in ", #call, " at ", __FILE__, ":", __LINE__));                    \
  } while (0)

struct CufftPlan {
  cufftHandle handle = 0;
  CufftPlan() = default;
  CufftPlan(const CufftPlan&) = delete;
  CufftPlan& operator=(const CufftPlan&) = delete;
  ~CufftPlan() {
    if (handle) cufftDestroy(handle);
  }
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

double norm_scale(const FftAttrs& a, int64_t n) {
  switch (a.norm) {
    case FftNorm::Backward: return a.inverse ? 1.0 / static_cast<double>(n) : 1.0;
    case FftNorm::Ortho: return 1.0 / std::sqrt(static_cast<double>(n));
    case FftNorm::Forward: return a.inverse ? 1.0 : 1.0 / static_cast<double>(n);
  }
  return 1.0;
}

// A transform of length 1 is the identity in every norm: the value itself,
// (x, 0) from a real input, or the real part into a real output (no plan).
void lower_length_one(LowerCtx& c, NodeId id, cufftType type, int64_t rows) {
  const NodeId in_id = c.node(id).inputs[0];
  const DType in_dt = c.type(in_id).dtype;
  const void* in = c.in_ptr(id, 0);
  void* out = c.ptr(id);
  const auto r = static_cast<size_t>(rows);
  if (type == CUFFT_R2C && in_dt != DType::F32) c.need_workspace(r * sizeof(float));
  void* const* ws = c.workspace_slot();
  c.add(id, "fft (n=1: copy)", [=](cudaStream_t s) {
    switch (type) {
      case CUFFT_R2C: {
        const void* src = in;
        if (in_dt != DType::F32) {
          launch_cast(in_dt, DType::F32, in, *ws, rows, s);
          src = *ws;
        }
        RLX_CUDA_CHECK(cudaMemcpy2DAsync(out, 8, src, 4, 4, r, cudaMemcpyDeviceToDevice, s));
        RLX_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(out) + 4, 8, 0, 4, r, s));
        break;
      }
      case CUFFT_C2R: RLX_CUDA_CHECK(cudaMemcpy2DAsync(out, 4, in, 8, 4, r, cudaMemcpyDeviceToDevice, s)); break;
      default: RLX_CUDA_CHECK(cudaMemcpyAsync(out, in, r * 8, cudaMemcpyDeviceToDevice, s));
    }
  });
}

void lower_fft(LowerCtx& c, NodeId id) {
  const Node& node = c.node(id);
  const auto& a = node.attr<FftAttrs>();
  const NodeId in_id = node.inputs[0];
  const DType in_dt = c.type(in_id).dtype;
  const int64_t in_len = c.dims(in_id).back();
  const int64_t n = a.real_output ? a.n : in_len;
  const int64_t in_count = static_numel(c.type(in_id).shape);
  const int64_t out_count = static_numel(node.type.shape);
  const int64_t rows = in_len > 0 ? in_count / in_len : 0;
  if (rows == 0) return;
  RLX_CHECK(n >= 1, c.graph.describe(id), ": fft length must be >= 1, got ", n);

  const cufftType type = a.real_input ? CUFFT_R2C : a.real_output ? CUFFT_C2R : CUFFT_C2C;
  if (n == 1) return lower_length_one(c, id, type, rows);
  auto plan = std::make_shared<CufftPlan>();
  RLX_CUFFT_CHECK(cufftCreate(&plan->handle));
  RLX_CUFFT_CHECK(cufftSetAutoAllocation(plan->handle, 0));
  long long len = n;
  size_t work = 0;
  // inembed = onembed = nullptr: the basic layout, rows back to back
  // (n reals or n/2 + 1 bins per row for the real transforms).
  RLX_CUFFT_CHECK(cufftMakePlanMany64(plan->handle, 1, &len, nullptr, 1, 0, nullptr, 1, 0, type, rows, &work));

  const void* in = c.in_ptr(id, 0);
  void* out = c.ptr(id);
  // Where the input must be staged, and as what.
  const bool convert = a.real_input && in_dt != DType::F32;
  const bool stage = convert || a.real_output || reinterpret_cast<uintptr_t>(in) % 16 != 0;
  const DType staged_dt = a.real_input ? DType::F32 : DType::C64;
  const size_t stage_bytes = stage ? align256(static_cast<size_t>(dtype_bytes(staged_dt, in_count))) : 0;
  c.need_workspace(stage_bytes + work);
  void* const* ws = c.workspace_slot();

  const double scale = norm_scale(a, n);
  const int64_t out_floats = a.real_output ? out_count : 2 * out_count;
  const bool inverse = a.inverse;
  c.add(id, str("fft (cuFFT ", a.real_input ? "r2c" : a.real_output ? "c2r" : inverse ? "c2c inverse" : "c2c", " n=", n,
                " x", rows, ")"),
        [=](cudaStream_t s) {
          char* base = static_cast<char*>(*ws);
          void* src = const_cast<void*>(in);
          if (stage) {
            if (convert) launch_cast(in_dt, DType::F32, in, base, in_count, s);
            else RLX_CUDA_CHECK(cudaMemcpyAsync(base, in, static_cast<size_t>(dtype_bytes(in_dt, in_count)),
                                                cudaMemcpyDeviceToDevice, s));
            src = base;
          }
          RLX_CUFFT_CHECK(cufftSetStream(plan->handle, s));
          RLX_CUFFT_CHECK(cufftSetWorkArea(plan->handle, work ? base + stage_bytes : nullptr));
          switch (type) {
            case CUFFT_R2C:
              RLX_CUFFT_CHECK(cufftExecR2C(plan->handle, static_cast<cufftReal*>(src), static_cast<cufftComplex*>(out)));
              break;
            case CUFFT_C2R:
              RLX_CUFFT_CHECK(cufftExecC2R(plan->handle, static_cast<cufftComplex*>(src), static_cast<cufftReal*>(out)));
              break;
            default:
              RLX_CUFFT_CHECK(cufftExecC2C(plan->handle, static_cast<cufftComplex*>(src), static_cast<cufftComplex*>(out),
                                           inverse ? CUFFT_INVERSE : CUFFT_FORWARD));
          }
          if (scale != 1.0) launch_fft_scale(static_cast<float*>(out), out_floats, static_cast<float>(scale), s);
        });
}

}  // namespace

void register_fft_lowerings() {
  register_cuda_lowering(OpKind::Fft, {DType::C64, DType::C64}, lower_fft, "fft (cuFFT c2c)");
  register_cuda_lowering(OpKind::Fft, {DType::C64, DType::F32}, lower_fft, "fft (cuFFT c2r)");
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    register_cuda_lowering(OpKind::Fft, {t, DType::C64}, lower_fft, str("fft (cuFFT r2c, ", dtype_name(t), " input)"));
}

}  // namespace rlx::cuda
