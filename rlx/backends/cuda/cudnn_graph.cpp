// cuDNN 9 backend (graph) API, wrapped in small RAII helpers: tensors and
// operations are backend descriptors; an operation graph goes through engine
// heuristics (mode A, then fallback) and the first engine config whose
// execution plan finalizes, runs once and survives a test CUDA-graph capture
// is kept. Plans are cached per (device, spec key) for the process.
//
// Attention is the composite graph cuDNN's fused flash-attention engines
// match (the one cudnn-frontend's SDPA node builds): S = Q·Kᵀ (f32) → ·scale
// → [causal select] → softmax as max, sub, exp, sum, div, with its statistics
// branch (log, add → a virtual tensor) → P (io dtype) → O = P·V. Matmul is one
// MATMUL followed by pointwise ADD (bias) and an activation. Norms are one
// NORM_FORWARD op in the inference phase.
#include "rlx/backends/cuda/cudnn_graph.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "rlx/core/error.h"

#if RLX_HAVE_CUDNN
#include <cudnn.h>

#include <deque>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#endif

namespace rlx::cuda::cudnn {

void AttentionSpec::set_dense_strides() {
  q_row_stride = int64_t{H} * D;
  k_row_stride = v_row_stride = int64_t{Hkv} * D;
  q_batch_stride = q_row_stride * Lq;
  k_batch_stride = v_batch_stride = k_row_stride * Lk;
}

std::string AttentionSpec::key() const {
  return str("attn ", dtype_name(dtype), " B", B, " H", H, "/", Hkv, " L", Lq, "x", Lk, " D", D, " s", q_row_stride, ",",
             q_batch_stride, ",", k_row_stride, ",", k_batch_stride, ",", v_row_stride, ",", v_batch_stride, " scale ",
             scale, causal ? " causal" : "");
}

std::string MatmulSpec::key() const {
  return str("mm ", dtype_name(dtype), " b", batch, " ", M, "x", N, "x", K, trans_a ? " tA" : "", trans_b ? " tB" : "",
             " ld", lda, ",", ldb, " bs", a_batch_stride, ",", b_batch_stride,
             has_bias ? str(" bias ", dtype_name(bias_dtype)) : std::string(), " ", activation_name(act));
}

std::string NormSpec::key() const {
  return str(layer ? "layer_norm " : "rms_norm ", dtype_name(dtype), "/", dtype_name(param_dtype), " ", rows, "x", cols,
             " eps ", eps);
}

#if !RLX_HAVE_CUDNN

// Built without cuDNN: every builder refuses, nothing can execute.
class Plan {};

bool available(std::string* why) {
  if (why) *why = "built without cuDNN";
  return false;
}
std::string version() { return {}; }

namespace {
std::shared_ptr<const Plan> refuse(std::string* why) {
  if (why) *why = "built without cuDNN";
  return nullptr;
}
}  // namespace

std::shared_ptr<const Plan> attention_plan(int, const AttentionSpec&, std::string* why) { return refuse(why); }
std::shared_ptr<const Plan> matmul_plan(int, const MatmulSpec&, std::string* why) { return refuse(why); }
std::shared_ptr<const Plan> norm_plan(int, const NormSpec&, std::string* why) { return refuse(why); }
size_t plan_workspace_bytes(const Plan&) { return 0; }
std::string plan_engine(const Plan&) { return {}; }
struct Execution::Pack {};
Execution::Execution(std::shared_ptr<const Plan> plan, std::vector<void*> pointers)
    : plan_(std::move(plan)), pointers_(std::move(pointers)) {}
Execution::~Execution() = default;
void Execution::run(void*, cudaStream_t) { throw Unsupported("cudnn: built without cuDNN"); }
int64_t plans_built() { return 0; }

#else  // RLX_HAVE_CUDNN

namespace {

// A plan build step cuDNN refused; the message becomes the refusal reason.
struct Refused {
  std::string what;
};

// cuDNN's own explanation of the last failure on this thread (e.g. which
// support check an engine failed), one line and bounded, or "".
std::string last_error_text() {
  char buf[1024] = {};
  cudnnGetLastErrorString(buf, sizeof buf);
  std::string s(buf);
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  const size_t end = s.find_last_not_of(' ');
  s.resize(end == std::string::npos ? 0 : end + 1);
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

// "what: CUDNN_STATUS_X" plus cuDNN's last error text when it has one.
std::string status_text(cudnnStatus_t st, const char* what) {
  const std::string detail = last_error_text();
  return str(what, ": ", cudnnGetErrorString(st), detail.empty() ? std::string() : str(" (", detail, ")"));
}

void check(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) throw Refused{status_text(st, what)};
}

// Owns one backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    check(cudnnBackendSetAttribute(d_, name, type, count, values), "cudnnBackendSetAttribute");
    return *this;
  }
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& d) {
    cudnnBackendDescriptor_t raw = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  Desc& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t t) { return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t); }
  void finalize(const char* what) { check(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t to_cudnn(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: throw Refused{str("dtype ", dtype_name(t))};
  }
}

// One cuDNN handle per device, created on first use and kept for the
// process (destroying it at exit could run after the CUDA context is gone).
// Executions on one handle are serialized: the stream is handle state.
struct HandleSlot {
  cudnnHandle_t handle = nullptr;
  std::mutex run_mu;
};

HandleSlot& handle_for(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<HandleSlot>> slots;
  std::lock_guard lock(mu);
  auto& slot = slots[device];
  if (!slot) {
    DeviceGuard guard(device);
    auto s = std::make_unique<HandleSlot>();
    check(cudnnCreate(&s->handle), "cudnnCreate");
    slot = std::move(s);
  }
  return *slot;
}

std::atomic<int64_t> g_plans_built{0};

}  // namespace

// An operation graph under construction, then its finalized plan. Owns every
// descriptor it made (cuDNN keeps references) and the host values of the
// by-value scalars the variant pack points at.
class Plan {
 public:
  int device = 0;
  cudnnHandle_t handle = nullptr;
  std::deque<Desc> descs;               // tensors and operations, stable addresses
  std::vector<const Desc*> ops;         // in graph order
  std::vector<int64_t> io_uids;         // bound pointers, in the documented order
  std::vector<int64_t> io_bytes;        // extent of each, for the capture probe
  std::vector<int64_t> scalar_uids;     // by-value scalars
  std::deque<std::array<char, 8>> scalar_values;
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  int64_t engine = -1;
  int64_t next_uid = 1;

  Desc& make(cudnnBackendDescriptorType_t type) { return descs.emplace_back(type); }

  Desc& tensor(cudnnDataType_t dt, std::vector<int64_t> dims, std::vector<int64_t> strides, bool is_virtual,
               int64_t* uid_out = nullptr) {
    const int64_t uid = next_uid++;
    Desc& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data())
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
    bool v = is_virtual;
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    t.finalize("tensor descriptor");
    if (uid_out) *uid_out = uid;
    return t;
  }

  // A bound (non-virtual) tensor; its pointer comes with the Execution.
  Desc& io(DType dt, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    int64_t extent = 1;  // elements from the first to one past the last
    for (size_t i = 0; i < dims.size(); ++i) extent += (dims[i] - 1) * strides[i];
    int64_t uid = 0;
    Desc& t = tensor(to_cudnn(dt), dims, strides, false, &uid);
    io_uids.push_back(uid);
    io_bytes.push_back(extent * dtype_size(dt));
    return t;
  }

  Desc& virt(cudnnDataType_t dt, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return tensor(dt, std::move(dims), std::move(strides), true);
  }

  // A [1,1,...] scalar passed by value (host memory, read at execute time).
  template <class T>
  Desc& scalar(cudnnDataType_t dt, T value, size_t rank) {
    const int64_t uid = next_uid++;
    std::vector<int64_t> ones(rank, 1);
    Desc& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(rank), ones.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(rank), ones.data())
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
    bool by_value = true;
    t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize("scalar tensor descriptor");
    auto& store = scalar_values.emplace_back();
    static_assert(sizeof(T) <= 8);
    std::memcpy(store.data(), &value, sizeof(T));
    scalar_uids.push_back(uid);
    return t;
  }

  // y = mode(x[, b[, t]]) computed in `prec`.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc* b, const Desc* t,
                 const Desc& y, int64_t axis = -1) {
    Desc& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode).set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw.finalize("pointwise descriptor");
    Desc& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op.finalize("pointwise operation");
    ops.push_back(&op);
  }

  void matmul(const Desc& a, const Desc& b, const Desc& c) {
    Desc& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("matmul descriptor");
    Desc& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
        .finalize("matmul operation");
    ops.push_back(&op);
  }

  void reduction(cudnnReduceTensorOp_t which, const Desc& x, const Desc& y) {
    Desc& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &which)
        .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize("reduction descriptor");
    Desc& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd)
        .finalize("reduction operation");
    ops.push_back(&op);
  }

  void add_op(const Desc& op) { ops.push_back(&op); }

  // Operation graph → heuristics → the first engine config that finalizes,
  // executes and captures.
  void finalize_plan() {
    Desc& graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc* op : ops) raw.push_back(op->get());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data())
        .finalize("operation graph");
    // Why each heuristics mode gave nothing usable, for the refusal reason.
    std::vector<std::string> reasons;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "heuristics fallback";
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      try {
        heur.finalize("finalize");
      } catch (const Refused& r) {
        reasons.push_back(str(mode_name, " ", r.what));
        continue;
      }
      // cuDNN 9 drops configs that fail its support checks here: a count of 0
      // means none passed (the debug log, CUDNN_LOGLEVEL_DBG=2, lists why).
      int64_t count = 0;
      const cudnnStatus_t st =
          cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
      if (st != CUDNN_STATUS_SUCCESS) {
        reasons.push_back(str(mode_name, " ", status_text(st, "results")));
        continue;
      }
      if (count == 0) {
        const std::string detail = last_error_text();
        reasons.push_back(str(mode_name, ": no viable engine config",
                              detail.empty() ? std::string() : str(" (", detail, ")")));
        continue;
      }
      std::vector<std::unique_ptr<Desc>> cfgs;
      std::vector<cudnnBackendDescriptor_t> cfg_raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        cfg_raw.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                     cfg_raw.data()),
            "engine heuristics results");
      for (int64_t i = 0; i < got; ++i) {
        try {
          auto p = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[static_cast<size_t>(i)])
              .finalize("execution plan");
          int64_t ws = 0, n = 0;
          check(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
                "plan workspace size");
          probe(*p, ws);
          plan = std::move(p);
          workspace = ws;
          engine = engine_index(*cfgs[static_cast<size_t>(i)]);
          return;
        } catch (const Refused& r) {
          reasons.push_back(str(mode_name, " config ", i, "/", got, " ", r.what));
        }
      }
    }
    std::string why = "no engine found";
    for (size_t i = 0; i < reasons.size(); ++i) why += str(i ? "; " : ": ", reasons[i]);
    if (why.size() > 700) why = why.substr(0, 700) + "...";
    throw Refused{why};
  }

 private:
  static int64_t engine_index(const Desc& cfg) {
    try {
      Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t raw = eng.get();
      int64_t n = 0, idx = -1;
      check(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
            "engine");
      check(cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx), "engine index");
      return idx;
    } catch (const Refused&) {
      return -1;
    }
  }

  // Runs the plan once on scratch buffers (loads its kernels, catches launch
  // failures) and once under stream capture in the encoder's mode: a plan
  // that cannot be captured into a CUDA graph is refused here, not at run.
  void probe(const Desc& p, int64_t ws) {
    DeviceGuard guard(device);
    std::vector<void*> bufs;
    auto free_all = [&] {
      for (void* b : bufs) cudaFree(b);
    };
    auto cuda = [&](cudaError_t e, const char* what) {
      if (e != cudaSuccess) {
        cudaGetLastError();
        free_all();
        throw Refused{str(what, ": ", cudaGetErrorString(e))};
      }
    };
    std::vector<int64_t> uids = io_uids;
    std::vector<void*> ptrs;
    for (int64_t bytes : io_bytes) {
      void* b = nullptr;
      cuda(cudaMalloc(&b, static_cast<size_t>(bytes)), "probe buffer");
      bufs.push_back(b);
      cuda(cudaMemset(b, 0, static_cast<size_t>(bytes)), "probe buffer");
      ptrs.push_back(b);
    }
    void* wsp = nullptr;
    if (ws > 0) {
      cuda(cudaMalloc(&wsp, static_cast<size_t>(ws)), "probe workspace");
      bufs.push_back(wsp);
    }
    for (size_t i = 0; i < scalar_uids.size(); ++i) {
      uids.push_back(scalar_uids[i]);
      ptrs.push_back(scalar_values[i].data());
    }
    cuda(cudaStreamSynchronize(cudaStreamLegacy), "probe buffers");  // the memsets above, before the probe stream reads
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "probe stream");
    std::string error;
    try {
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
          .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
          .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp)
          .finalize("variant pack");
      HandleSlot& slot = handle_for(device);
      std::lock_guard lock(slot.run_mu);
      check(cudnnSetStream(handle, stream), "cudnnSetStream");
      check(cudnnBackendExecute(handle, p.get(), pack.get()), "cudnnBackendExecute");
      if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
        error = str("execute: ", cudaGetErrorString(e));
      } else if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        error = "cudaStreamBeginCapture failed";
      } else {
        const cudnnStatus_t st = cudnnBackendExecute(handle, p.get(), pack.get());
        cudaGraph_t g = nullptr;
        const cudaError_t ce = cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        if (st != CUDNN_STATUS_SUCCESS || ce != cudaSuccess)
          error = str("engine cannot be captured into a CUDA graph (",
                      st != CUDNN_STATUS_SUCCESS ? cudnnGetErrorString(st) : cudaGetErrorString(ce), ")");
      }
    } catch (const Refused& r) {
      error = r.what;
    }
    cudaGetLastError();  // clear a sticky launch error the probe provoked
    cudaStreamDestroy(stream);
    free_all();
    if (!error.empty()) throw Refused{error};
  }
};

namespace {

std::shared_ptr<const Plan> cached_plan(int device, const std::string& key, std::string* why,
                                        const std::function<void(Plan&)>& build) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Plan>> plans;
  static std::map<std::string, std::string> refusals;
  const std::string full = str("dev", device, " ", key);
  std::lock_guard lock(mu);
  if (auto it = plans.find(full); it != plans.end()) return it->second;
  if (auto it = refusals.find(full); it != refusals.end()) {
    if (why) *why = it->second;
    return nullptr;
  }
  std::string reason;
  if (!available(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  try {
    auto p = std::make_shared<Plan>();
    p->device = device;
    p->handle = handle_for(device).handle;
    build(*p);
    p->finalize_plan();
    ++g_plans_built;
    plans.emplace(full, p);
    return p;
  } catch (const Refused& r) {
    reason = r.what;
  } catch (const Error& e) {  // a CUDA error while probing, an unsupported dtype
    reason = e.what();
  }
  refusals.emplace(full, reason);
  if (why) *why = reason;
  return nullptr;
}

}  // namespace

bool available(std::string* why) {
  const size_t v = cudnnGetVersion();
  if (v < 90000) {
    if (why) *why = str("cuDNN ", v, " is older than 9.0");
    return false;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

std::string version() {
  const size_t v = cudnnGetVersion();  // 9.14.0 → 91400
  return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

std::shared_ptr<const Plan> attention_plan(int device, const AttentionSpec& s, std::string* why) {
  // The graph is the one cudnn-frontend's SDPA node expands to for a plain
  // (no bias, no dropout, no padding) forward pass, since that is what the
  // fused flash-attention engines' pattern matcher recognizes. In particular
  // the softmax keeps its statistics branch (log Σ + max → a virtual f32
  // [B, H, Lq, 1] tensor) even in inference: without it the matcher does not
  // find the softmax and every engine refuses ("Dropout set of ops not
  // configured correctly ... tag_mha_graph" in the cuDNN debug log).
  return cached_plan(device, s.key(), why, [&](Plan& p) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
    const int64_t B = s.B, H = s.H, G = s.Hkv, Lq = s.Lq, Lk = s.Lk, D = s.D;
    // [B, heads, seq, D] views of the BSHD buffers; K is bound transposed.
    const Desc& q = p.io(s.dtype, {B, H, Lq, D}, {s.q_batch_stride, D, s.q_row_stride, 1});
    const Desc& kt = p.io(s.dtype, {B, G, D, Lk}, {s.k_batch_stride, D, 1, s.k_row_stride});
    const Desc& v = p.io(s.dtype, {B, G, Lk, D}, {s.v_batch_stride, D, s.v_row_stride, 1});
    const Desc& o = p.io(s.dtype, {B, H, Lq, D}, {Lq * H * D, D, H * D, 1});
    const std::vector<int64_t> sd = {B, H, Lq, Lk}, ss = {H * Lq * Lk, Lq * Lk, Lk, 1};
    const std::vector<int64_t> rd = {B, H, Lq, 1}, rs = {H * Lq, Lq, 1, 1};

    const Desc& scores = p.virt(f32, sd, ss);
    p.matmul(q, kt, scores);
    const Desc& scaled = p.virt(f32, sd, ss);
    p.pointwise(CUDNN_POINTWISE_MUL, f32, scores, &p.scalar(f32, s.scale, 4), nullptr, scaled);
    const Desc* last = &scaled;
    if (s.causal) {
      // Key j is visible to query i when i + Lk − Lq ≥ j (bottom-right aligned).
      // Index math in int32, the comparison in boolean, as the frontend does.
      const Desc* row = &p.virt(i32, sd, ss);
      p.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *last, nullptr, nullptr, *row, 2);
      if (Lk != Lq) {
        const Desc& plus_k = p.virt(i32, sd, ss);
        p.pointwise(CUDNN_POINTWISE_ADD, i32, *row, &p.scalar(i32, static_cast<int32_t>(Lk), 4), nullptr, plus_k);
        const Desc& minus_q = p.virt(i32, sd, ss);
        p.pointwise(CUDNN_POINTWISE_SUB, i32, plus_k, &p.scalar(i32, static_cast<int32_t>(Lq), 4), nullptr, minus_q);
        row = &minus_q;
      }
      const Desc& col = p.virt(i32, sd, ss);
      p.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *last, nullptr, nullptr, col, 3);
      const Desc& visible = p.virt(CUDNN_DATA_BOOLEAN, sd, ss);
      p.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, *row, &col, nullptr, visible);
      const Desc& lowest = p.scalar(f32, std::numeric_limits<float>::lowest(), 4);
      const Desc& masked = p.virt(f32, sd, ss);
      p.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, *last, &lowest, &visible, masked);
      last = &masked;
    }
    // Softmax over keys: exp(s − max) / Σ exp(s − max), plus its statistics.
    const Desc& mx = p.virt(f32, rd, rs);
    p.reduction(CUDNN_REDUCE_TENSOR_MAX, *last, mx);
    const Desc& centered = p.virt(f32, sd, ss);
    p.pointwise(CUDNN_POINTWISE_SUB, f32, *last, &mx, nullptr, centered);
    const Desc& ex = p.virt(f32, sd, ss);
    p.pointwise(CUDNN_POINTWISE_EXP, f32, centered, nullptr, nullptr, ex);
    const Desc& sum = p.virt(f32, rd, rs);
    p.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    const Desc& log_sum = p.virt(f32, rd, rs);
    p.pointwise(CUDNN_POINTWISE_LOG, f32, sum, nullptr, nullptr, log_sum);
    const Desc& stats = p.virt(f32, rd, rs);  // log-sum-exp; virtual: inference does not keep it
    p.pointwise(CUDNN_POINTWISE_ADD, f32, mx, &log_sum, nullptr, stats);
    const Desc& probs = p.virt(to_cudnn(s.dtype), sd, ss);  // the second matmul reads P in the io dtype
    p.pointwise(CUDNN_POINTWISE_DIV, f32, ex, &sum, nullptr, probs);
    p.matmul(probs, v, o);
  });
}

std::shared_ptr<const Plan> matmul_plan(int device, const MatmulSpec& s, std::string* why) {
  return cached_plan(device, s.key(), why, [&](Plan& p) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const int64_t M = s.M, N = s.N, K = s.K;
    const int64_t a_batch = s.a_batch_stride ? s.batch : 1, b_batch = s.b_batch_stride ? s.batch : 1;
    // Logical A is [M, K]; stored transposed it is [K, M] with row stride lda.
    const Desc& a = p.io(s.dtype, {a_batch, M, K},
                         {s.a_batch_stride ? s.a_batch_stride : M * K, s.trans_a ? 1 : s.lda, s.trans_a ? s.lda : 1});
    const Desc& b = p.io(s.dtype, {b_batch, K, N},
                         {s.b_batch_stride ? s.b_batch_stride : K * N, s.trans_b ? 1 : s.ldb, s.trans_b ? s.ldb : 1});
    const Desc* bias = s.has_bias ? &p.io(s.bias_dtype, {1, 1, N}, {N, N, 1}) : nullptr;
    const std::vector<int64_t> cd = {s.batch, M, N}, cs = {M * N, N, 1};
    const bool epilogue = s.has_bias || s.act != Activation::None;
    // The output is bound last, so create the chain first and the io tensor at its end.
    const Desc* acc = epilogue ? &p.virt(f32, cd, cs) : nullptr;
    const Desc* bias_out = s.has_bias && s.act != Activation::None ? &p.virt(f32, cd, cs) : nullptr;
    const Desc& c = p.io(s.dtype, cd, cs);
    if (!epilogue) {
      p.matmul(a, b, c);
      return;
    }
    p.matmul(a, b, *acc);
    const Desc* cur = acc;
    if (s.has_bias) {
      const Desc& dst = bias_out ? *bias_out : c;
      p.pointwise(CUDNN_POINTWISE_ADD, f32, *cur, bias, nullptr, dst);
      cur = &dst;
    }
    if (s.act != Activation::None) {
      cudnnPointwiseMode_t mode;
      switch (s.act) {
        case Activation::Relu: mode = CUDNN_POINTWISE_RELU_FWD; break;
        case Activation::GeluErf: mode = CUDNN_POINTWISE_GELU_FWD; break;
        case Activation::GeluTanh: mode = CUDNN_POINTWISE_GELU_APPROX_TANH_FWD; break;
        default: throw Refused{str("activation ", activation_name(s.act))};
      }
      p.pointwise(mode, f32, *cur, nullptr, nullptr, c);
    }
  });
}

std::shared_ptr<const Plan> norm_plan(int device, const NormSpec& s, std::string* why) {
  return cached_plan(device, s.key(), why, [&](Plan& p) {
    const int64_t R = s.rows, C = s.cols;
    // cuDNN normalizes each sample n over (C, H, W): x as [rows, cols, 1, 1].
    const std::vector<int64_t> xd = {R, C, 1, 1}, xs = {C, 1, C, C};
    const std::vector<int64_t> pd = {1, C, 1, 1}, ps = {C, 1, C, C};
    const Desc& x = p.io(s.dtype, xd, xs);
    const Desc& gamma = p.io(s.param_dtype, pd, ps);
    const Desc* beta = s.layer ? &p.io(s.param_dtype, pd, ps) : nullptr;
    const Desc& y = p.io(s.dtype, xd, xs);
    const Desc& eps = p.scalar(CUDNN_DATA_FLOAT, s.eps, 4);
    Desc& op = p.make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
    const cudnnBackendNormMode_t mode = s.layer ? CUDNN_LAYER_NORM : CUDNN_RMS_NORM;
    const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_INFERENCE;
    op.set(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode)
        .set(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase)
        .set_desc(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, gamma)
        .set_desc(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, eps)
        .set_desc(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, y);
    if (beta) op.set_desc(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, *beta);
    op.finalize("norm forward operation");
    p.add_op(op);
  });
}

size_t plan_workspace_bytes(const Plan& plan) { return static_cast<size_t>(plan.workspace); }
std::string plan_engine(const Plan& plan) { return str("cudnn engine ", plan.engine); }
int64_t plans_built() { return g_plans_built.load(); }

struct Execution::Pack {
  void* workspace = nullptr;
  std::unique_ptr<Desc> desc;
};

Execution::Execution(std::shared_ptr<const Plan> plan, std::vector<void*> pointers)
    : plan_(std::move(plan)), pointers_(std::move(pointers)), pack_(std::make_unique<Pack>()) {
  RLX_ASSERT(plan_ && pointers_.size() == plan_->io_uids.size());
}

Execution::~Execution() = default;

void Execution::run(void* workspace, cudaStream_t stream) {
  const Plan& p = *plan_;
  if (!pack_->desc || pack_->workspace != workspace) {
    std::vector<int64_t> uids = p.io_uids;
    std::vector<void*> ptrs = pointers_;
    for (size_t i = 0; i < p.scalar_uids.size(); ++i) {
      uids.push_back(p.scalar_uids[i]);
      ptrs.push_back(const_cast<char*>(p.scalar_values[i].data()));
    }
    try {
      auto d = std::make_unique<Desc>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      d->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
          .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
          .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
          .finalize("variant pack");
      pack_->desc = std::move(d);
      pack_->workspace = workspace;
    } catch (const Refused& r) {
      throw DeviceError(str("cudnn: ", r.what));
    }
  }
  HandleSlot& slot = handle_for(p.device);
  std::lock_guard lock(slot.run_mu);
  cudnnStatus_t st = cudnnSetStream(p.handle, stream);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(p.handle, p.plan->get(), pack_->desc->get());
  if (st != CUDNN_STATUS_SUCCESS)
    throw DeviceError(str("cudnnBackendExecute (", plan_engine(p), "): ", cudnnGetErrorString(st)));
}

#endif  // RLX_HAVE_CUDNN

}  // namespace rlx::cuda::cudnn
