// The cuDNN graph path's lowerings. register_cudnn_lowerings() runs after
// every family registered its own lowerings and wraps the Attention, MatMul,
// FusedMatMulBiasAct, LayerNorm and RmsNorm entries: with the op kind's knob
// (RLX_CUDNN_ATTENTION / _MATMUL / _NORM) on -- for attention also by default,
// where calibration or measured shapes favour cuDNN -- the wrapper checks the node is
// eligible and asks cudnn_graph for a plan; on refusal it runs the built-in
// lowering it replaced and appends "(cudnn <kind> refused: <why>)" to those
// thunks' names, which the dispatch report prints. With the knob off it is
// the built-in lowering, unchanged.
#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/cudnn_graph.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool half_dtype(DType t) { return t == DType::F16 || t == DType::BF16; }

// Appends the thunk that executes `plan` with `pointers` bound.
void add_cudnn_thunk(LowerCtx& c, NodeId id, const std::shared_ptr<const cudnn::Plan>& plan,
                     std::vector<void*> pointers, const std::string& what) {
  c.need_workspace(cudnn::plan_workspace_bytes(*plan));
  auto exec = std::make_shared<cudnn::Execution>(plan, std::move(pointers));
  void* const* wslot = c.workspace_slot();
  c.add(id, str(what, " (", cudnn::plan_engine(*plan), ")"), [exec, wslot](cudaStream_t s) { exec->run(*wslot, s); });
}

// --- attention ---------------------------------------------------------------

// Q/K/V row and batch strides as the built-in lowering reads them: a Narrow of
// a fused QKV tensor that attention reads in place has its source's strides.
void operand_strides(LowerCtx& c, NodeId id, int64_t* row, int64_t* batch) {
  const auto d = c.dims(id);  // [B, L, W]
  if (narrow_folds_into_attention(c.graph, c.all_users(), id)) {
    const auto sd = c.dims(c.node(id).inputs[0]);
    *row = sd[2];
    *batch = sd[1] * sd[2];
    return;
  }
  *row = d[2];
  *batch = d[1] * d[2];
}

bool try_attention(LowerCtx& c, NodeId id, std::string* why) {
  const Node& n = c.node(id);
  const auto& a = n.attr<AttentionAttrs>();
  const DType dt = n.type.dtype;
  if (!half_dtype(dt)) return (*why = str("dtype ", dtype_name(dt))), false;
  if (a.softcap > 0.0f) return (*why = "softcap"), false;
  if (a.kv_len_input) return (*why = "kv_len input"), false;
  switch (a.mask) {
    case MaskKind::None:
    case MaskKind::Causal: break;
    case MaskKind::SlidingWindow: return (*why = "sliding window mask"), false;
    case MaskKind::Custom: return (*why = "key mask"), false;
    case MaskKind::Bias: return (*why = "bias mask"), false;
  }
  if (a.head_dim % 8 != 0 || a.head_dim > 256) return (*why = str("head dim ", a.head_dim)), false;
  const auto qd = c.dims(n.inputs[0]), kd = c.dims(n.inputs[1]);
  cudnn::AttentionSpec s;
  s.dtype = dt;
  s.B = static_cast<int>(qd[0]);
  s.Lq = static_cast<int>(qd[1]);
  s.Lk = static_cast<int>(kd[1]);
  s.H = a.num_heads;
  s.Hkv = a.num_kv_heads;
  s.D = a.head_dim;
  s.scale = a.effective_scale();
  s.causal = a.mask == MaskKind::Causal;
  if (s.causal && s.Lq > s.Lk) return (*why = "causal with more queries than keys"), false;
  operand_strides(c, n.inputs[0], &s.q_row_stride, &s.q_batch_stride);
  operand_strides(c, n.inputs[1], &s.k_row_stride, &s.k_batch_stride);
  operand_strides(c, n.inputs[2], &s.v_row_stride, &s.v_batch_stride);
  std::vector<void*> ptrs = {c.in_ptr(id, 0), c.in_ptr(id, 1), c.in_ptr(id, 2), c.ptr(id)};
  for (void* p : ptrs)
    if (!aligned16(p)) return (*why = "operand not 16-byte aligned"), false;
  for (int64_t st : {s.q_row_stride, s.k_row_stride, s.v_row_stride})
    if (st % 8 != 0) return (*why = "row stride not a multiple of 8 elements"), false;
  auto plan = cudnn::attention_plan(c.props.index, s, why);
  if (!plan) return false;
  add_cudnn_thunk(c, id, plan, std::move(ptrs),
                  str("cudnn sdpa ", dtype_name(dt), " D=", s.D, s.causal ? " causal" : ""));
  return true;
}

// --- matmul + epilogue -------------------------------------------------------

// Flat batch stride of an operand broadcast to `out_batch` (0 = shared), or
// false when its batch dims are neither contiguous nor fully broadcast.
bool flat_batch_stride(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_batch, int64_t matrix,
                       int64_t* stride) {
  const size_t rank = dims.size() - 2;
  bool any_broadcast = false, all_broadcast = true;
  for (size_t i = 0; i < out_batch.size(); ++i) {
    const size_t from_end = out_batch.size() - 1 - i;
    const int64_t d = from_end < rank ? dims[rank - 1 - from_end] : 1;
    const bool bc = d == 1 && out_batch[i] != 1;
    any_broadcast |= bc;
    all_broadcast &= bc || out_batch[i] == 1;
  }
  if (all_broadcast) return (*stride = 0), true;
  if (any_broadcast) return false;
  *stride = matrix;
  return true;
}

bool try_matmul(LowerCtx& c, NodeId id, std::string* why) {
  const Node& n = c.node(id);
  const DType dt = n.type.dtype;
  if (!half_dtype(dt)) return (*why = str("dtype ", dtype_name(dt))), false;
  bool ta = false, tb = false;
  NodeId bias = -1;
  Activation act = Activation::None;
  if (n.op == OpKind::MatMul) {
    const auto& a = n.attr<MatMulAttrs>();
    ta = a.transpose_a;
    tb = a.transpose_b;
  } else {
    const auto& a = n.attr<FusedMatMulBiasActAttrs>();
    tb = a.transpose_b;
    act = a.act;
    bias = n.inputs[2];
  }
  if (act == Activation::Silu) return (*why = "activation silu"), false;
  const auto ad = c.dims(n.inputs[0]), bd = c.dims(n.inputs[1]), od = c.dims(id);
  cudnn::MatmulSpec s;
  s.dtype = dt;
  s.trans_a = ta;
  s.trans_b = tb;
  s.M = od[od.size() - 2];
  s.N = od.back();
  s.K = ta ? ad[ad.size() - 2] : ad.back();
  s.lda = ad.back();
  s.ldb = bd.back();
  s.act = act;
  if (bias >= 0) {
    s.has_bias = true;
    s.bias_dtype = c.type(bias).dtype;
    if (static_numel(c.type(bias).shape) != s.N) return (*why = "bias is not a vector of N"), false;
  }
  const std::vector<int64_t> out_batch(od.begin(), od.end() - 2);
  int64_t batch = 1;
  for (int64_t b : out_batch) batch *= b;
  int64_t sa = 0, sb = 0;
  if (!flat_batch_stride(ad, out_batch, s.M * s.K, &sa) || !flat_batch_stride(bd, out_batch, s.K * s.N, &sb))
    return (*why = "batch broadcast layout"), false;
  if (sb == 0 && !ta && (sa != 0 || batch == 1)) {
    s.M *= batch;  // a shared B: every batch row is one more row of A
    s.batch = 1;
  } else {
    s.batch = batch;
    s.a_batch_stride = sa;
    s.b_batch_stride = sb;
  }
  std::vector<void*> ptrs = {c.in_ptr(id, 0), c.in_ptr(id, 1)};
  if (bias >= 0) ptrs.push_back(c.ptr(bias));
  ptrs.push_back(c.ptr(id));
  for (void* p : ptrs)
    if (!aligned16(p)) return (*why = "operand not 16-byte aligned"), false;
  auto plan = cudnn::matmul_plan(c.props.index, s, why);
  if (!plan) return false;
  add_cudnn_thunk(c, id, plan, std::move(ptrs),
                  str("cudnn matmul ", dtype_name(dt), bias >= 0 ? " +bias" : "",
                      act != Activation::None ? str(" +", activation_name(act)) : std::string()));
  return true;
}

// --- norms -------------------------------------------------------------------

bool try_norm(LowerCtx& c, NodeId id, std::string* why) {
  const Node& n = c.node(id);
  cudnn::NormSpec s;
  s.layer = n.op == OpKind::LayerNorm;
  s.dtype = n.type.dtype;
  s.param_dtype = c.type(n.inputs[1]).dtype;
  s.cols = n.type.shape.back().value;
  s.rows = static_numel(n.type.shape) / std::max<int64_t>(s.cols, 1);
  s.eps = n.attr<NormAttrs>().eps;
  std::vector<void*> ptrs = {c.in_ptr(id, 0), c.in_ptr(id, 1)};
  if (s.layer) ptrs.push_back(c.in_ptr(id, 2));
  ptrs.push_back(c.ptr(id));
  for (void* p : ptrs)
    if (!aligned16(p)) return (*why = "operand not 16-byte aligned"), false;
  auto plan = cudnn::norm_plan(c.props.index, s, why);
  if (!plan) return false;
  add_cudnn_thunk(c, id, plan, std::move(ptrs),
                  str("cudnn ", s.layer ? "layer_norm " : "rms_norm ", dtype_name(s.dtype)));
  return true;
}

// --- when to try cuDNN ---------------------------------------------------------

using Wants = bool (*)(LowerCtx&, NodeId, const char* knob);

bool knob_on(LowerCtx&, NodeId, const char* knob) { return env_bool(knob); }

// RLX_CUDNN_ATTENTION: 1 always tries cuDNN, 0 never; auto (the default)
// takes whichever path the calibration measured faster at the nearest
// attention bucket, and without a close bucket tries cuDNN for the prefill
// shapes where its fused engines measured faster than rlx's kernel on the
// H200 (head dim ≥ 64, ≥ 128 queries: 1.3-2.5x, docs/performance.md).
bool wants_cudnn_attention(LowerCtx& c, NodeId id, const char* knob) {
  const std::string v = env_string(knob);
  if (v == "1" || v == "on" || v == "true") return true;
  if (v == "0" || v == "off" || v == "false") return false;
  if (v != "auto") throw InvalidArgument(str(knob, "=", v, ": expected auto, 1 or 0"));
  const Node& n = c.node(id);
  const auto& a = n.attr<AttentionAttrs>();
  const auto qd = c.dims(n.inputs[0]), kd = c.dims(n.inputs[1]);
  if (const auto& cal = device_calibration(c.props.index)) {
    double distance = 0;
    const ShapeBucket* b = cal->nearest(str("attention.", dtype_name(n.type.dtype)),
                                        {qd[0] * a.num_heads, qd[1], kd[1], a.head_dim}, &distance);
    if (b && distance <= kAttentionBorrowDistance) {
      const VariantTiming* best = b->best();
      return best && best->variant == kCudnnAttentionVariant;
    }
  }
  return a.head_dim >= 64 && qd[1] >= 128;
}

using TryCudnn = bool (*)(LowerCtx&, NodeId, std::string*);

// Re-registers every cuda entry of `op` as: `wants` → try cuDNN, else (or on
// refusal) the entry's original lowering.
void wrap(OpKind op, const char* knob, const char* kind, TryCudnn attempt, Wants wants = knob_on) {
  auto& reg = KernelRegistry::global();
  for (const KernelKey& key : reg.keys(kCudaBackend)) {
    if (key.op != op) continue;
    const KernelEntry* e = reg.find_exact(key);
    if (!e) continue;
    const CudaLowering builtin = std::any_cast<CudaLowering>(e->impl);  // copied: the entry is replaced below
    const std::string description = e->description;
    CudaLowering wrapped = [builtin, knob, kind, attempt, wants](LowerCtx& c, NodeId id) {
      if (!wants(c, id, knob)) return builtin(c, id);
      std::string why;
      if (attempt(c, id, &why)) return;
      const size_t before = c.thunk_count();
      builtin(c, id);
      c.note_thunks(before, str(" (cudnn ", kind, " refused: ", why, ")"));
    };
    register_cuda_lowering(op, key.dtypes, std::move(wrapped), description, key.variadic, key.custom_name);
  }
}

}  // namespace

void register_cudnn_lowerings() {
  wrap(OpKind::Attention, "RLX_CUDNN_ATTENTION", "attention", try_attention, wants_cudnn_attention);
  wrap(OpKind::MatMul, "RLX_CUDNN_MATMUL", "matmul", try_matmul);
  wrap(OpKind::FusedMatMulBiasAct, "RLX_CUDNN_MATMUL", "matmul", try_matmul);
  wrap(OpKind::LayerNorm, "RLX_CUDNN_NORM", "norm", try_norm);
  wrap(OpKind::RmsNorm, "RLX_CUDNN_NORM", "norm", try_norm);
}

}  // namespace rlx::cuda
