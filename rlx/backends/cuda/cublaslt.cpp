#include "rlx/backends/cuda/cublaslt.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/gemm_choices.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/core/env.h"
#include "rlx/core/half.h"
#include "rlx/core/log.h"

#define RLX_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                            \
    cublasStatus_t rlx_st_ = (call);                                                              \
    if (rlx_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                            \
      throw ::rlx::DeviceError(::rlx::str("cuBLASLt error ", cublasLtGetStatusName(rlx_st_), " (", \
                                          cublasLtGetStatusString(rlx_st_), ") in ", #call, " at ", \
                                          __FILE__, ":", __LINE__));                              \
  } while (0)

namespace rlx::cuda {

bool cublaslt_epilogue_supports(Activation act) {
  return act == Activation::None || act == Activation::Relu || act == Activation::GeluTanh;
}

struct GemmEngine::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // heuristic order
  std::vector<GemmAlgo> infos;
  int chosen = 0;
  std::string note = "heuristic: algo 0";
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F8E4M3: return CUDA_R_8F_E4M3;
    case DType::F8E5M2: return CUDA_R_8F_E5M2;
    default: throw Unsupported(str("cuBLASLt GEMM: no ", dtype_name(t), " support"));
  }
}

// Largest power of two (≤ 256) dividing the address and every batch step.
uint32_t alignment(const void* p, int64_t stride_elems, int64_t elem) {
  auto v = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(stride_elems * elem) | 256u;
  return static_cast<uint32_t>(v & (~v + 1));
}

// The algorithm's identity, read attribute by attribute (each has its own width).
std::vector<int64_t> algo_config(const cublasLtMatmulAlgo_t& algo) {
  static constexpr cublasLtMatmulAlgoConfigAttributes_t kAttrs[] = {
      CUBLASLT_ALGO_CONFIG_ID,          CUBLASLT_ALGO_CONFIG_TILE_ID,       CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
      CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
      CUBLASLT_ALGO_CONFIG_STAGES_ID,   CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
  std::vector<int64_t> cfg;
  for (auto attr : kAttrs) {
    size_t size = 0;
    uint64_t v = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS ||
        size > sizeof v || cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, size, &size) != CUBLAS_STATUS_SUCCESS)
      v = 0;
    cfg.push_back(static_cast<int64_t>(v));
  }
  return cfg;
}

// An fp8 GEMM's scale pointers (cuBLAS "A" is our B), in the shared descriptor.
void set_scale_pointers(cublasLtMatmulDesc_t desc, const GemmArgs& a) {
  if (a.scale_b)
    RLX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.scale_b, sizeof a.scale_b));
  if (a.scale_a)
    RLX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.scale_a, sizeof a.scale_a));
}

// Elements an operand spans: `rows` rows of leading dimension ld per batch.
int64_t extent(int64_t rows, int64_t ld, int64_t stride, int64_t batch) {
  return (batch > 1 ? (batch - 1) * stride : 0) + rows * ld;
}

}  // namespace

void fill_uniform(void* p, size_t bytes, DType t) {
  const bool fp8 = t == DType::F8E4M3 || t == DType::F8E5M2;
  RLX_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || fp8, "fill_uniform: ", dtype_name(t));
  const size_t e = static_cast<size_t>(dtype_size(t)), n = std::min<size_t>(bytes, size_t{1} << 20) / e;
  std::vector<uint16_t> h16(t == DType::F32 || fp8 ? 0 : n);
  std::vector<float> h32(t == DType::F32 ? n : 0);
  std::vector<uint8_t> h8(fp8 ? n : 0);
  uint32_t x = 0x9e3779b9u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float v = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
    if (t == DType::F32) h32[i] = v;
    else if (fp8) h8[i] = static_cast<uint8_t>(x >> 24) & 0xF7u;  // bit 3 clear: no exponent of all ones (finite)
    else h16[i] = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
  }
  const void* host = t == DType::F32 ? static_cast<const void*>(h32.data())
                     : fp8           ? static_cast<const void*>(h8.data())
                                     : h16.data();
  size_t done = n * e;
  RLX_CUDA_CHECK(cudaMemcpy(p, host, done, cudaMemcpyHostToDevice));
  for (char* d = static_cast<char*>(p); done < bytes; done *= 2)
    RLX_CUDA_CHECK(cudaMemcpy(d + done, d, std::min(done, bytes - done), cudaMemcpyDeviceToDevice));
  settle_default_stream();  // timed work runs on rlx's own stream
}

namespace {

// Device memory of `bytes`, or null when the device is short of memory
// (tuning then keeps the other choice); fill() writes values in [-1, 1) of
// type t (an uploaded 1 MB pattern, doubled by device copies).
struct Scratch {
  void* p = nullptr;
  size_t bytes;
  explicit Scratch(size_t n) : bytes(n) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
  }
  ~Scratch() {
    if (p) cudaFree(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void fill(DType t) { fill_uniform(p, bytes, t); }
};

constexpr double kTuneFlops = 2e9;  // smaller GEMMs: launch noise hides the differences
// Longer GEMMs keep the heuristic's first choice, as torch.matmul does. A
// candidate's 300 µs samples cannot rank kernels that run a millisecond or
// more: power management decides those. At 8192³ the sampled winner (even one
// re-checked back to back) ran 0.93-0.94× the first choice on an H100; the
// first choice runs 0.98-1.01× torch.matmul on the H200 (session 35).
constexpr double kTuneMaxFlops = 4e11;

// `reps` launches of one candidate captured into a CUDA graph, for timing as
// one replay; null where the candidate refused (a launch returned false) or
// its launches cannot be captured.
class TimedGraph {
 public:
  TimedGraph(const std::function<bool(cudaStream_t)>& launch, int reps, cudaStream_t s) {
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    bool ok = true;
    try {
      for (int i = 0; i < reps && ok; ++i) ok = launch(s);
    } catch (...) {
      ok = false;
    }
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &g);  // always: the stream leaves capture mode
    if (ok && end == cudaSuccess && cudaGraphInstantiate(&exec_, g, 0) != cudaSuccess) exec_ = nullptr;
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
  }
  ~TimedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  TimedGraph(const TimedGraph&) = delete;
  TimedGraph& operator=(const TimedGraph&) = delete;
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// Best time (ms) of each way of running one problem, on a private stream: a
// warm-up launch each (first launches load modules), then five interleaved
// rounds of ~300 µs samples, the minimum per candidate (robust to clock
// drift). A launch returning false scores infinity. Each sample replays a
// CUDA graph of the candidate's launches: timed as plain launches, GEMMs of
// a few µs measured the host's launch rate instead (cublasLtMatmul takes
// several µs of CPU per call), so every algorithm scored about the same
// and the choice was noise (MiniLM's QKV at m = 4096: algo 0 chosen at a
// "measured" 10.7 µs while algo 1 ran in 7.35 µs and algo 0 in 8.48 µs).
// Where a candidate cannot be captured, it is timed as plain launches.
std::vector<double> time_candidates(const std::vector<std::function<bool(cudaStream_t)>>& launch) {
  Stream stream;
  Event start, stop;
  const size_t n = launch.size();
  auto plain_ms = [&](size_t r, int reps) {
    start.record(stream.get());
    bool ok = true;
    for (int i = 0; i < reps && ok; ++i) ok = launch[r](stream.get());
    stop.record(stream.get());
    stop.synchronize();
    return ok ? static_cast<double>(stop.elapsed_ms_since(start)) / reps : std::numeric_limits<double>::infinity();
  };
  for (size_t r = 0; r < n; ++r) (void)plain_ms(r, 1);
  const double est = plain_ms(0, 2);  // an upper bound: launch-bound for short GEMMs
  const int reps = std::clamp(static_cast<int>(0.3 / std::max(est, 1e-3)), 2, 20);
  std::vector<std::unique_ptr<TimedGraph>> graphs;
  for (size_t r = 0; r < n; ++r) {
    graphs.push_back(std::make_unique<TimedGraph>(launch[r], reps, stream.get()));
    if (graphs.back()->get()) RLX_CUDA_CHECK(cudaGraphLaunch(graphs.back()->get(), stream.get()));  // warm
  }
  stream.synchronize();
  auto graph_ms = [&](size_t r) {
    start.record(stream.get());
    RLX_CUDA_CHECK(cudaGraphLaunch(graphs[r]->get(), stream.get()));
    stop.record(stream.get());
    stop.synchronize();
    return static_cast<double>(stop.elapsed_ms_since(start)) / reps;
  };
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  for (int round = 0; round < 5; ++round)
    for (size_t r = 0; r < n; ++r) best[r] = std::min(best[r], graphs[r]->get() ? graph_ms(r) : plain_ms(r, reps));
  return best;
}

}  // namespace

std::string gemm_family(const GemmArgs& a) {
  if (a.fp8()) return "gemm.fp8";
  if (a.dtype == DType::F32 && a.allow_tf32) return "gemm.tf32";
  return str("gemm.", dtype_name(a.dtype));
}

GemmEngine::GemmEngine(int device) : device_(device), timed_choice_(env_bool("RLX_CUDA_GEMM_TUNE")) {
  DeviceGuard g(device);
  RLX_CUBLAS_CHECK(cublasLtCreate(&handle_));
  RLX_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  if (env_bool("RLX_CUDA_GEMM_CACHE")) {
    try {
      choice_file_ =
          std::make_unique<GemmChoiceFile>(gemm_choices_path(device_props(device).uuid), device_identity(device));
    } catch (const Error& e) {  // no cache folder (no HOME): timings stay in this process
      log_verbose("gemm choices: not kept on disk: ", e.what());
    }
  }
  if (choice_file_) {
    tuned_ = choice_file_->choices().algos;
    for (const auto& [shape, name] : choice_file_->choices().sm90) {
      if (name == "cublaslt") sm90_choice_[shape] = std::nullopt;
      for (Sm90GemmKernel k : {Sm90GemmKernel::PingPong, Sm90GemmKernel::Classic})
        if (name == sm90_gemm_kernel_name(k)) sm90_choice_[shape] = k;
    }
  }
}

// A shape's chosen algorithm (kernel), in memory and, with RLX_CUDA_GEMM_CACHE, in the file. Under mu_.
void GemmEngine::keep_algo(const std::string& shape, const std::vector<int64_t>& config) {
  tuned_[shape] = config;
  if (choice_file_) choice_file_->record_algo(shape, config);
}
void GemmEngine::keep_sm90(const std::string& shape, std::optional<Sm90GemmKernel> choice) {
  sm90_choice_[shape] = choice;
  if (choice_file_) choice_file_->record_sm90(shape, choice ? sm90_gemm_kernel_name(*choice) : "cublaslt");
}

GemmEngine::~GemmEngine() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

std::string GemmEngine::describe(const GemmArgs& a) {
  const std::string types = a.fp8() ? str(dtype_name(a.a_type()), " x ", dtype_name(a.b_type()), " -> ",
                                          dtype_name(a.dtype), a.scale_a_rows ? " row-scaled" : "",
                                          a.scale_b_rows ? " col-scaled" : "")
                                    : std::string(dtype_name(a.dtype));
  return str("gemm ", types, " M=", a.M, " N=", a.N, " K=", a.K, " batch=", a.batch, " ta=", a.trans_a,
             " tb=", a.trans_b, " bias=", a.bias != nullptr, a.residual ? " +residual" : "", " act=",
             activation_name(a.act));
}

// Every field of a problem but its pointers: the shape a timing is kept for.
static std::string shape_fields(const GemmArgs& a) {
  return str(static_cast<int>(a.dtype), ",", static_cast<int>(a.a_type()), ",", static_cast<int>(a.b_type()), ",",
             a.scale_a != nullptr, a.scale_a_rows, a.scale_b != nullptr, a.scale_b_rows, ",", a.trans_a, a.trans_b,
             ",", a.M, ",", a.N, ",", a.K, ",", a.lda, ",", a.ldb, ",", a.ldc, ",", a.stride_a, ",", a.stride_b, ",",
             a.stride_c, ",", a.batch, ",", a.bias != nullptr, ",", static_cast<int>(a.act), ",", a.allow_tf32, ",",
             a.residual != nullptr);
}

// The shape a timed choice is lent to: M rounded down to a power of two, so
// the GEMMs of one layer at batch lengths within 2× of each other share one
// timing (`rlx embed` plans ~20 batch lengths). Empty (nothing lent) for a
// batched problem, whose strides follow M. RLX_CUDA_GEMM_TUNE_NEAR.
static int64_t near_m(const GemmArgs& a) {
  if (a.batch != 1 || a.M < 1 || !env_bool("RLX_CUDA_GEMM_TUNE_NEAR")) return 0;
  return static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(a.M)));
}
static std::string near_fields(const GemmArgs& a) {
  GemmArgs b = a;
  b.M = near_m(a);
  return b.M > 0 ? shape_fields(b) : std::string();
}

GemmEngine::Key GemmEngine::key(const GemmArgs& a) {
  const int64_t e = dtype_size(a.dtype), ea = dtype_size(a.a_type()), eb = dtype_size(a.b_type());
  return str(shape_fields(a), ",", alignment(a.A, a.stride_a, ea), ",", alignment(a.B, a.stride_b, eb), ",",
             alignment(a.C, a.stride_c, e), ",", a.bias ? alignment(a.bias, 0, e) : 0u, ",",
             a.residual ? alignment(a.residual, a.stride_c, e) : 0u);
}

GemmEngine::Plan& GemmEngine::get(const GemmArgs& a) {
  std::lock_guard lock(mu_);
  auto k = key(a);
  auto it = plans_.find(k);
  if (it != plans_.end()) return *it->second;

  RLX_CHECK(cublaslt_epilogue_supports(a.act), "cuBLASLt epilogue cannot apply ", activation_name(a.act));
  if (a.fp8())
    RLX_CHECK_AS(Unsupported, !a.trans_a && a.trans_b && a.batch == 1 && a.act == Activation::None && !a.residual &&
                                  !(a.bias && a.dtype == DType::F32),
                 describe(a), ": cuBLASLt's fp8 GEMM takes A [M, K] and B [N, K], one batch, no activation, "
                 "residual or f32 bias");
  auto p = std::make_unique<Plan>();
  const cudaDataType_t t = cuda_type(a.dtype), ta = cuda_type(a.a_type()), tb = cuda_type(a.b_type());
  const int64_t e = dtype_size(a.dtype), ea = dtype_size(a.a_type()), eb = dtype_size(a.b_type());
  cublasComputeType_t compute =
      a.dtype == DType::F32 && a.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RLX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS "A" is our B.
  cublasOperation_t op_a = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (a.bias) {
    epi = a.act == Activation::Relu ? CUBLASLT_EPILOGUE_RELU_BIAS
          : a.act == Activation::GeluTanh ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  } else if (a.act != Activation::None) {
    epi = a.act == Activation::Relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU;
  }
  RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (a.bias) {
    cudaDataType_t bt = t;
    RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  // FP8: cuBLAS "A" is our B, so its scale is scale_b (N values as an outer vector), "B"'s scale_a (M values).
  // The pointers are set per run, as the bias's.
  if (a.fp8()) {
    auto mode = [](bool rows) {
      return static_cast<int32_t>(rows ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                       : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
    };
    const int32_t ma = mode(a.scale_b_rows), mb = mode(a.scale_a_rows);
    if (a.scale_b)
      RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
    if (a.scale_a)
      RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
    set_scale_pointers(p->desc, a);
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                    int64_t stride) {
    RLX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, type, rows, cols, ld));
    if (a.batch > 1) {
      int32_t count = static_cast<int32_t>(a.batch);
      RLX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      RLX_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  };
  const auto M = static_cast<uint64_t>(a.M), N = static_cast<uint64_t>(a.N), K = static_cast<uint64_t>(a.K);
  layout(&p->a, tb, a.trans_b ? K : N, a.trans_b ? N : K, a.ldb, a.stride_b);
  layout(&p->b, ta, a.trans_a ? M : K, a.trans_a ? K : M, a.lda, a.stride_a);
  layout(&p->c, t, N, M, a.ldc, a.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  RLX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  uint32_t al_a = alignment(a.B, a.stride_b, eb), al_b = alignment(a.A, a.stride_a, ea);
  uint32_t al_d = alignment(a.C, a.stride_c, e);
  uint32_t al_c = a.residual ? alignment(a.residual, a.stride_c, e) : al_d;  // cuBLASLt's C input
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates]{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, kMaxCandidates,
                                                     results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw DeviceError(str("cuBLASLt has no algorithm for ", describe(a), " (", cublasLtGetStatusString(st), ")"));
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    p->infos.push_back(GemmAlgo{static_cast<int>(p->algos.size()), algo_config(results[i].algo),
                                results[i].workspaceSize});
    p->algos.push_back(results[i].algo);
  }
  if (p->algos.empty()) throw DeviceError(str("cuBLASLt has no usable algorithm for ", describe(a)));
  // A large problem is timed on its own shape (more exact than a calibrated
  // neighbour's winner); otherwise the calibration's chooser, if any, picks.
  const double flops = 2.0 * static_cast<double>(a.M) * static_cast<double>(a.N) * static_cast<double>(a.K) *
                       static_cast<double>(a.batch);
  const bool timed = timed_choice_ && flops >= kTuneFlops && flops <= kTuneMaxFlops && p->algos.size() > 1 &&
                     choose_by_timing(a, *p);
  if (timed_choice_ && flops > kTuneMaxFlops) p->note = "heuristic: algo 0 (0.4 TFLOP or more: not timed)";
  if (!timed && chooser_) {
    auto [rank, note] = chooser_(a, p->infos);
    if (rank >= 0 && rank < static_cast<int>(p->algos.size())) p->chosen = rank, p->note = std::move(note);
  }
  auto& ref = *p;
  plans_.emplace(std::move(k), std::move(p));
  return ref;
}

// cuBLASLt's heuristic ranks by a model; on an H200 its first choice for
// MiniLM's FFN down projection took 72 µs where its sixth took 66 µs. So the
// first plan of a large problem times every candidate on scratch operands of
// the same shape, with a workspace of its own (a program may be running on
// another stream), and keeps the fastest. A later plan of the same shape with
// other pointer alignments reuses the winner when it is among its candidates,
// so one process runs one algorithm per shape.
bool GemmEngine::choose_by_timing(const GemmArgs& a, Plan& p) {
  const std::string shape = shape_fields(a), near = near_fields(a);
  if (auto it = tuned_.find(shape); it != tuned_.end()) {
    for (const GemmAlgo& g : p.infos)
      if (g.config == it->second) {
        p.chosen = g.rank;
        p.note = str("measured: algo ", g.rank, " (fastest when this shape was first planned)");
        return true;
      }
  }
  if (auto it = tuned_near_.find(near); !near.empty() && it != tuned_near_.end()) {
    for (const GemmAlgo& g : p.infos)
      if (g.config == it->second.config) {
        p.chosen = g.rank;
        p.note = str("measured: algo ", g.rank, " (fastest at M = ", it->second.M, ", timed in this process)");
        keep_algo(shape, g.config);
        return true;
      }
  }
  DeviceGuard guard(device_);
  const int64_t e = dtype_size(a.dtype);
  const int64_t a_rows = a.trans_a ? a.K : a.M, b_rows = a.trans_b ? a.N : a.K;
  Scratch A(static_cast<size_t>(extent(a_rows, a.lda, a.stride_a, a.batch) * dtype_size(a.a_type())));
  Scratch B(static_cast<size_t>(extent(b_rows, a.ldb, a.stride_b, a.batch) * dtype_size(a.b_type())));
  Scratch C(static_cast<size_t>(extent(a.M, a.ldc, a.stride_c, a.batch) * e));
  Scratch R(a.residual ? C.bytes : 1);
  Scratch bias(static_cast<size_t>((a.bias ? a.N : 1) * e));
  Scratch scales(static_cast<size_t>(std::max<int64_t>({a.M, a.N, 1}) * 4));
  Scratch ws(workspace_bytes_);
  if (!A.p || !B.p || !C.p || !R.p || !bias.p || !scales.p || !ws.p) return false;
  A.fill(a.a_type());
  B.fill(a.b_type());
  bias.fill(a.dtype);
  if (a.residual) R.fill(a.dtype);
  if (a.bias)
    RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.p, sizeof bias.p));
  if (a.fp8()) {
    scales.fill(DType::F32);
    GemmArgs s = a;
    s.scale_a = a.scale_a ? static_cast<const float*>(scales.p) : nullptr;
    s.scale_b = a.scale_b ? static_cast<const float*>(scales.p) : nullptr;
    set_scale_pointers(p.desc, s);
  }
  const float alpha = 1.0f, beta = a.residual ? 1.0f : 0.0f;
  const void* c_in = a.residual ? R.p : C.p;
  std::vector<std::function<bool(cudaStream_t)>> launch;
  for (size_t r = 0; r < p.algos.size(); ++r)
    launch.push_back([&, r](cudaStream_t st) {
      return cublasLtMatmul(handle_, p.desc, &alpha, B.p, p.a, A.p, p.b, &beta, c_in, p.c, C.p, p.c, &p.algos[r], ws.p,
                            workspace_bytes_, st) == CUBLAS_STATUS_SUCCESS;
    });
  const size_t n = launch.size();
  const std::vector<double> best = time_candidates(launch);
  const size_t win = static_cast<size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  if (!std::isfinite(best[win])) return false;
  p.chosen = static_cast<int>(win);
  p.note = str("measured: algo ", win, " fastest of ", n, " (", best[win] * 1e3, " us; algo 0 ", best[0] * 1e3, " us)");
  keep_algo(shape, p.infos[win].config);
  if (!near.empty()) tuned_near_.try_emplace(near, NearChoice<std::vector<int64_t>>{p.infos[win].config, a.M});
  return true;
}

// cuBLASLt (its epilogue, then `act` as a unary kernel if it differs) against
// rlx's sm90 kernels with `act` fused, timed on scratch operands of the shape.
// Without an activation to save, the ping-pong kernel won this timing on the
// H200 only at K = 384 (MiniLM's QKV and attention-out projections; it lost
// at K = 768, 1536 and 3072), so longer K is not timed: planning stays short.
constexpr int64_t kSm90PlainMaxK = 512;
std::optional<Sm90GemmKernel> GemmEngine::prefer_sm90(const GemmArgs& a, Activation act, std::string* note) {
  auto say = [&](std::string s) {
    if (note) *note = std::move(s);
  };
  const std::string mode = env_string("RLX_CUDA_SM90_GEMM");
  RLX_CHECK(mode == "auto" || mode == "1" || mode == "0", "RLX_CUDA_SM90_GEMM must be auto, 1 or 0, not '", mode, "'");
  if (mode == "0") return say("RLX_CUDA_SM90_GEMM=0"), std::nullopt;
  if (a.fp8()) return say("sm90 gemm: no fp8 kernel"), std::nullopt;
  if (const char* why = sm90_gemm_unsupported(a)) return say(str("sm90 gemm: ", why)), std::nullopt;
  if (!sm90_gemm_available(device_))
    return say("sm90 gemm: needs compute capability 9.0 and an sm_90a build"), std::nullopt;
  if (mode == "1") return say("RLX_CUDA_SM90_GEMM=1"), Sm90GemmKernel::Auto;
  const double flops = 2.0 * static_cast<double>(a.M) * static_cast<double>(a.N) * static_cast<double>(a.K);
  if (flops < kTuneFlops) return say("sm90 gemm: below 2 GFLOP, cuBLASLt kept"), std::nullopt;
  if (act == a.act && a.K > kSm90PlainMaxK)
    return say(str("sm90 gemm: cuBLASLt kept (no separate pass to save, K > ", kSm90PlainMaxK, ")")), std::nullopt;
  const auto shape_of = [&](int64_t M) {
    return str(static_cast<int>(a.dtype), ",", M, ",", a.N, ",", a.K, ",", a.lda, ",", a.ldb, ",", a.ldc, ",",
               a.bias != nullptr, ",", static_cast<int>(a.act), ",", static_cast<int>(act));
  };
  const std::string shape = shape_of(a.M);
  const std::string near = near_m(a) > 0 ? shape_of(near_m(a)) : std::string();
  auto name = [](const std::optional<Sm90GemmKernel>& k) {
    return k ? str("sm90 gemm (", sm90_gemm_kernel_name(*k), ")") : std::string("cuBLASLt");
  };
  {
    std::lock_guard lock(mu_);
    if (auto it = sm90_choice_.find(shape); it != sm90_choice_.end())
      return say(str(name(it->second), ": fastest when this shape was first planned")), it->second;
    if (auto it = sm90_near_.find(near); !near.empty() && it != sm90_near_.end()) {
      keep_sm90(shape, it->second.config);
      return say(str(name(it->second.config), ": fastest at M = ", it->second.M, ", timed in this process")),
             it->second.config;
    }
  }
  Plan& p = get(a);
  DeviceGuard guard(device_);
  const int64_t e = dtype_size(a.dtype);
  Scratch A(static_cast<size_t>(a.M * a.lda * e)), B(static_cast<size_t>(a.N * a.ldb * e));
  Scratch C(static_cast<size_t>(a.M * a.ldc * e)), bias(static_cast<size_t>(a.N * e)), ws(workspace_bytes_);
  if (!A.p || !B.p || !C.p || !bias.p || !ws.p)
    return say("sm90 gemm: no scratch memory to time it, cuBLASLt kept"), std::nullopt;
  A.fill(a.dtype);
  B.fill(a.dtype);
  bias.fill(a.dtype);
  GemmArgs s = a;
  s.A = A.p, s.B = B.p, s.C = C.p, s.bias = a.bias ? bias.p : nullptr;
  if (a.bias)
    RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.p, sizeof bias.p));
  const float alpha = 1.0f, beta = 0.0f;
  const auto& algo = p.algos[static_cast<size_t>(p.chosen)];
  // Candidate 0 is cuBLASLt; a kernel the device cannot place times as infinite.
  const Sm90GemmKernel kernels[] = {Sm90GemmKernel::PingPong, Sm90GemmKernel::Classic};
  std::vector<std::function<bool(cudaStream_t)>> launch = {[&](cudaStream_t st) {
    if (cublasLtMatmul(handle_, p.desc, &alpha, B.p, p.a, A.p, p.b, &beta, C.p, p.c, C.p, p.c, &algo, ws.p,
                       workspace_bytes_, st) != CUBLAS_STATUS_SUCCESS)
      return false;
    if (act != a.act) launch_unary(activation_unary(act), a.dtype, C.p, C.p, a.M * a.N, st);
    return true;
  }};
  for (Sm90GemmKernel k : kernels)
    launch.push_back([&, k](cudaStream_t st) {
      try {
        launch_sm90_gemm(s, act, st, k);
      } catch (const Unsupported&) {
        return false;
      }
      return true;
    });
  const std::vector<double> t = time_candidates(launch);
  const size_t win = static_cast<size_t>(std::min_element(t.begin(), t.end()) - t.begin());
  const std::optional<Sm90GemmKernel> choice =
      win == 0 || !std::isfinite(t[win]) ? std::nullopt : std::optional(kernels[win - 1]);
  {
    std::lock_guard lock(mu_);
    keep_sm90(shape, choice);
    if (!near.empty()) sm90_near_.try_emplace(near, NearChoice<std::optional<Sm90GemmKernel>>{choice, a.M});
  }
  say(str(name(choice), " measured fastest: cuBLASLt", act != a.act ? " + unary " : " ", t[0] * 1e3, " us, sm90 (",
          activation_name(act), " fused) ping-pong ", t[1] * 1e3, " us, classic ", t[2] * 1e3, " us"));
  return choice;
}

void GemmEngine::plan(const GemmArgs& a) { (void)get(a); }

void GemmEngine::run(const GemmArgs& a, cudaStream_t stream) { run_candidate(a, get(a).chosen, stream); }

std::vector<GemmAlgo> GemmEngine::candidates(const GemmArgs& a) { return get(a).infos; }

void GemmEngine::run_candidate(const GemmArgs& a, int rank, cudaStream_t stream) {
  Plan& p = get(a);
  RLX_CHECK(rank >= 0 && rank < static_cast<int>(p.algos.size()), "cuBLASLt: candidate ", rank, " of ", describe(a),
            " does not exist (", p.algos.size(), " candidates)");
  // The bias pointer lives in the shared descriptor: set and use it under the lock.
  std::lock_guard lock(mu_);
  const float alpha = 1.0f, beta = a.residual ? 1.0f : 0.0f;
  if (a.bias)
    RLX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias));
  if (a.fp8()) set_scale_pointers(p.desc, a);
  RLX_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, a.B, p.a, a.A, p.b, &beta, a.residual ? a.residual : a.C,
                                  p.c, a.C, p.c,
                                  &p.algos[static_cast<size_t>(rank)], workspace_, workspace_bytes_, stream));
}

int GemmEngine::chosen_rank(const GemmArgs& a) { return get(a).chosen; }

std::string GemmEngine::choice_note(const GemmArgs& a) { return get(a).note; }

void GemmEngine::set_timed_choice(bool on) {
  std::lock_guard lock(mu_);
  timed_choice_ = on;
}

void GemmEngine::set_algo_chooser(GemmAlgoChooser chooser) {
  std::lock_guard lock(mu_);
  chooser_ = std::move(chooser);
}

}  // namespace rlx::cuda
