// MatMul and FusedMatMulBiasAct → cuBLASLt. Batch dims broadcast numpy-style:
// a shared 2-D B folds the batch into M (one large GEMM); equal or fully
// broadcast batches become one strided-batched GEMM; anything else loops.
// Epilogues cuBLASLt lacks (GELU-erf, SiLU) run as an in-place unary kernel.
// rlx's Hopper GEMM (kernels/gemm_sm90.h), which fuses any activation, takes
// a single GEMM instead where it was timed faster (GemmEngine::prefer_sm90).
// A residual norm's other term is added by cuBLASLt (try_fold_gemm_residual).
// ScaledMatMul (fp8) → cuBLASLt's fp8 GEMM; see lower_scaled_matmul.
#include <numeric>

#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/backends/cuda/kernels/scaled_matmul.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

// Stride (in elements) of each batch dim of an operand broadcast to `out_batch`.
std::vector<int64_t> batch_strides(const std::vector<int64_t>& dims, size_t out_rank, int64_t matrix) {
  const size_t rank = dims.size() - 2;
  std::vector<int64_t> st(out_rank, 0);
  int64_t s = matrix;
  for (size_t i = 0; i < rank; ++i) {
    size_t d = rank - 1 - i;
    size_t o = out_rank - 1 - i;
    st[o] = dims[d] == 1 ? 0 : s;
    s *= dims[d];
  }
  return st;
}

// One stride covering the flattened batch, if the operand's batch strides allow it.
bool flat_stride(const std::vector<int64_t>& st, const std::vector<int64_t>& out_batch, int64_t* stride) {
  bool all_zero = std::all_of(st.begin(), st.end(), [](int64_t v) { return v == 0; });
  if (all_zero) return (*stride = 0), true;
  // Contiguous: st[i] = st[i+1] * out_batch[i+1], innermost st = matrix size.
  for (size_t i = 0; i + 1 < st.size(); ++i)
    if (st[i] != st[i + 1] * out_batch[i + 1]) return false;
  *stride = st.empty() ? 0 : st.back();
  return true;
}

// `residual`: what try_fold_gemm_residual returned (the output's layout), added by every call.
void lower_matmul_like(LowerCtx& c, NodeId id, bool ta, bool tb, NodeId bias, Activation act,
                       const void* residual = nullptr) {
  const Node& n = c.node(id);
  const auto a_dims = c.dims(n.inputs[0]);
  const auto b_dims = c.dims(n.inputs[1]);
  const auto o_dims = c.dims(id);
  const DType dt = n.type.dtype;
  const int64_t e = dtype_size(dt);
  const int64_t M = o_dims[o_dims.size() - 2], N = o_dims.back();
  const int64_t K = ta ? a_dims[a_dims.size() - 2] : a_dims.back();
  const std::vector<int64_t> out_batch(o_dims.begin(), o_dims.end() - 2);
  const int64_t batch = std::accumulate(out_batch.begin(), out_batch.end(), int64_t{1}, std::multiplies<>());

  GemmArgs g;
  g.dtype = dt;
  g.trans_a = ta;
  g.trans_b = tb;
  g.N = N;
  g.K = K;
  g.lda = a_dims.back();
  g.ldb = b_dims.back();
  g.ldc = N;
  g.allow_tf32 = c.options.allow_tf32;
  const bool bias_ok = bias >= 0 && c.type(bias).dtype == dt;
  g.bias = bias_ok ? c.ptr(bias) : nullptr;
  const bool epi = cublaslt_epilogue_supports(act) && (bias < 0 || bias_ok);
  g.act = epi ? act : Activation::None;

  std::vector<GemmArgs> calls;
  const auto sa = batch_strides(a_dims, out_batch.size(), a_dims[a_dims.size() - 1] * a_dims[a_dims.size() - 2]);
  const auto sb = batch_strides(b_dims, out_batch.size(), K * N);
  int64_t fa = 0, fb = 0;
  if (b_dims.size() == 2 && !ta) {
    // Shared B: fold every batch row into M.
    g.M = M * batch;
    g.A = c.ptr(n.inputs[0]);
    g.B = c.ptr(n.inputs[1]);
    g.C = c.ptr(id);
    // A's batch must be contiguous for the fold; broadcasting A over batch is not.
    if (flat_stride(sa, out_batch, &fa) && (fa == M * K || batch == 1)) calls.push_back(g);
  }
  if (calls.empty() && flat_stride(sa, out_batch, &fa) && flat_stride(sb, out_batch, &fb)) {
    g.M = M;
    g.batch = batch;
    g.A = c.ptr(n.inputs[0]);
    g.B = c.ptr(n.inputs[1]);
    g.C = c.ptr(id);
    g.stride_a = fa;
    g.stride_b = fb;
    g.stride_c = M * N;
    calls.push_back(g);
  }
  if (calls.empty()) {
    g.M = M;
    for (int64_t bi = 0; bi < batch; ++bi) {
      int64_t rem = bi, oa = 0, ob = 0;
      for (size_t d = out_batch.size(); d-- > 0;) {
        int64_t idx = rem % out_batch[d];
        rem /= out_batch[d];
        oa += idx * sa[d];
        ob += idx * sb[d];
      }
      g.A = static_cast<const char*>(c.ptr(n.inputs[0])) + oa * e;
      g.B = static_cast<const char*>(c.ptr(n.inputs[1])) + ob * e;
      g.C = static_cast<char*>(c.ptr(id)) + bi * M * N * e;
      calls.push_back(g);
    }
  }
  if (residual != nullptr) {
    RLX_CHECK(act == Activation::None, "a folded residual is added after the product, not after an activation");
    for (GemmArgs& call : calls)
      call.residual = static_cast<const char*>(residual) + (static_cast<char*>(call.C) - static_cast<char*>(c.ptr(id)));
  }
  // rlx's Hopper GEMM fuses any activation (cuBLASLt's epilogue lacks GELU-erf);
  // it refuses a residual, which cuBLASLt then adds.
  std::string sm90_note;
  if (calls.size() == 1 && (bias < 0 || bias_ok)) {
    if (const auto kernel = c.gemm.prefer_sm90(calls[0], act, &sm90_note)) {
      const GemmArgs call = calls[0];
      c.add(id, str("sm90 gemm ", GemmEngine::describe(call), " + ", activation_name(act), " fused [", sm90_note, "]"),
            [call, act, k = *kernel](cudaStream_t s) { launch_sm90_gemm(call, act, s, k); });
      return;
    }
  }
  for (const auto& call : calls) {
    c.gemm.plan(call);
    GemmEngine* engine = &c.gemm;
    // Why the sm90 kernels did not take it.
    const bool say_sm90 = !sm90_note.empty();
    c.add(id, str("cublasLt ", GemmEngine::describe(call), " [", c.gemm.choice_note(call), say_sm90 ? "; " : "",
                  say_sm90 ? sm90_note : std::string(), "]"),
          [engine, call](cudaStream_t s) { engine->run(call, s); });
  }
  // What the epilogue could not do: a bias of another dtype (cast into the
  // workspace, then added), or the activation (in place).
  void* out = c.ptr(id);
  const int64_t rows = M * batch;
  if (bias >= 0 && !bias_ok) {
    const DType bt = c.type(bias).dtype;
    const void* bsrc = c.ptr(bias);
    void* const* ws = c.workspace_slot();
    c.need_workspace(static_cast<size_t>(N * e));
    const StridedShape shape = make_broadcast({rows, N}, {rows, N}, {N});
    c.add(id, str("bias add (", dtype_name(bt), " bias cast to ", dtype_name(dt), ")"),
          [=](cudaStream_t s) {
            launch_cast(bt, dt, bsrc, *ws, N, s);
            launch_binary(BinaryFn::Add, dt, out, *ws, out, shape, s);
          });
  }
  if (act != Activation::None && !epi) {
    const UnaryFn fn = activation_unary(act);
    c.add(id, str("epilogue ", activation_name(act)),
          [=](cudaStream_t s) { launch_unary(fn, dt, out, out, rows * N, s); });
  }
}

// ScaledMatMul: cuBLASLt's fp8 GEMM on the tensor cores (sm_89+), which
// applies both scales (one value, or one per row as outer vectors) and an
// f16/bf16 bias itself; an f32 result's bias is added after it by the
// epilogue kernel. Where cuBLASLt has no fp8 algorithm for the problem (an
// older GPU, e5m2 × e5m2, K or a leading dimension it cannot take, a scale
// mode this cuBLAS lacks), the same GEMM runs unscaled into f32 workspace if
// it can, else on both operands widened to f32 (exact) through the f32 GEMM,
// and the epilogue kernel applies the scales and bias and rounds once. Every
// path sums the exact fp8 products in f32.
void lower_scaled_matmul(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const DType out = n.type.dtype, at = c.type(n.inputs[0]).dtype, bt = c.type(n.inputs[1]).dtype;
  const auto bd = c.dims(n.inputs[1]);
  const int64_t N = bd[0], K = bd[1];
  const int64_t M = N > 0 ? static_numel(n.type.shape) / N : 0;
  if (M == 0 || N == 0) return;
  ScaledEpilogue epi;
  epi.M = M, epi.N = N, epi.out = out, epi.y = c.ptr(id);
  epi.sa = static_cast<const float*>(c.in_ptr(id, 2));
  epi.sb = static_cast<const float*>(c.in_ptr(id, 3));
  epi.sa_rows = static_numel(c.type(n.inputs[2]).shape) != 1;
  epi.sb_rows = static_numel(c.type(n.inputs[3]).shape) != 1;
  epi.bias = n.inputs.size() == 5 ? c.in_ptr(id, 4) : nullptr;
  if (K == 0) {  // no products: the bias, or zeros
    c.add(id, "fp8 matmul, K = 0 (bias or zeros)", [epi](cudaStream_t s) { launch_scaled_epilogue(epi, s); });
    return;
  }
  GemmArgs g;
  g.dtype = out, g.a_dtype = at, g.b_dtype = bt;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K, g.lda = K, g.ldb = K, g.ldc = N;
  g.A = c.in_ptr(id, 0), g.B = c.in_ptr(id, 1), g.C = c.ptr(id);
  g.scale_a = epi.sa, g.scale_b = epi.sb, g.scale_a_rows = epi.sa_rows, g.scale_b_rows = epi.sb_rows;
  g.bias = out != DType::F32 ? epi.bias : nullptr;
  GemmEngine* engine = &c.gemm;
  const bool fp8_cores = c.props.cc_major * 10 + c.props.cc_minor >= 89;
  std::string why = fp8_cores ? "" : str("compute capability ", c.props.cc_major, ".", c.props.cc_minor, " < 8.9");
  auto plans = [&](const GemmArgs& x) {
    try {
      engine->plan(x);
      return true;
    } catch (const Error& e) {
      if (why.empty()) why = e.what();
      return false;
    }
  };
  if (fp8_cores && plans(g)) {
    c.add(id, str("cublasLt ", GemmEngine::describe(g), " [", engine->choice_note(g), "]"),
          [engine, g](cudaStream_t s) { engine->run(g, s); });
    if (epi.bias && !g.bias) {  // f32 result: the bias after the scaled product, in place
      ScaledEpilogue add = epi;
      add.acc = static_cast<const float*>(epi.y), add.sa = add.sb = nullptr;
      c.add(id, "fp8 matmul bias (f32 result)", [add](cudaStream_t s) { launch_scaled_epilogue(add, s); });
    }
    return;
  }
  // The fallbacks plan with 256-byte-aligned placeholders for workspace
  // pointers (cuBLASLt plans are keyed by alignment) and read the workspace in the thunk.
  auto* const aligned = reinterpret_cast<void*>(uintptr_t{256});
  auto round_up = [](int64_t bytes) { return static_cast<size_t>((bytes + 255) / 256 * 256); };
  const size_t acc_bytes = round_up(M * N * 4);
  void* const* ws = c.workspace_slot();
  GemmArgs raw = g;  // the fp8 GEMM unscaled, into f32 workspace
  raw.dtype = DType::F32, raw.scale_a = raw.scale_b = nullptr, raw.scale_a_rows = raw.scale_b_rows = false;
  raw.bias = nullptr, raw.C = aligned;
  if (fp8_cores && plans(raw)) {
    c.need_workspace(acc_bytes);
    c.add(id, str("cublasLt ", GemmEngine::describe(raw), " [", engine->choice_note(raw), "] + epilogue kernel (", why,
                  ")"),
          [engine, raw, epi, ws](cudaStream_t s) {
            GemmArgs r = raw;
            r.C = *ws;
            engine->run(r, s);
            ScaledEpilogue e = epi;
            e.acc = static_cast<const float*>(*ws);
            launch_scaled_epilogue(e, s);
          });
    return;
  }
  GemmArgs wide;  // both operands widened to f32 (exact), the f32 GEMM (no TF32)
  wide.dtype = DType::F32, wide.trans_b = true;
  wide.M = M, wide.N = N, wide.K = K, wide.lda = K, wide.ldb = K, wide.ldc = N;
  wide.A = wide.B = wide.C = aligned;
  engine->plan(wide);
  const size_t a_bytes = round_up(M * K * 4), b_bytes = round_up(N * K * 4);
  c.need_workspace(acc_bytes + a_bytes + b_bytes);
  const void* a = g.A;
  const void* b = g.B;
  c.add(id, str("fp8 widened to f32 + cublasLt ", GemmEngine::describe(wide), " + epilogue kernel (no fp8 GEMM: ", why,
                ")"),
        [=](cudaStream_t s) {
          char* base = static_cast<char*>(*ws);
          GemmArgs w = wide;
          w.C = base, w.A = base + acc_bytes, w.B = base + acc_bytes + a_bytes;
          launch_cast(at, DType::F32, a, const_cast<void*>(w.A), M * K, s);
          launch_cast(bt, DType::F32, b, const_cast<void*>(w.B), N * K, s);
          engine->run(w, s);
          ScaledEpilogue e = epi;
          e.acc = static_cast<const float*>(w.C);
          launch_scaled_epilogue(e, s);
        });
}

}  // namespace

NodeId residual_norm_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p) {
  const Node& mm = g.node(p);
  if (mm.op == OpKind::FusedMatMulBiasAct) {
    if (mm.attr<FusedMatMulBiasActAttrs>().act != Activation::None) return -1;
  } else if (mm.op != OpKind::MatMul) {
    return -1;
  }
  const auto& us = users[static_cast<size_t>(p)];
  if (us.size() != 1 || is_graph_output(g, p)) return -1;
  const NodeId norm = us[0];
  const Node& n = g.node(norm);
  if (n.op != OpKind::FusedResidualLayerNorm && n.op != OpKind::FusedResidualRmsNorm) return -1;
  if ((n.inputs[0] == p) == (n.inputs[1] == p)) return -1;  // P is one term, once
  const NodeId r = n.inputs[0] == p ? n.inputs[1] : n.inputs[0];
  const DType t = mm.type.dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return -1;
  if (g.node(r).type.dtype != t || n.type.dtype != t) return -1;
  if (!is_static(mm.type.shape) || !is_static(g.node(r).type.shape) ||
      static_dims(g.node(r).type.shape) != static_dims(mm.type.shape))
    return -1;
  // The GEMM reads R at its own place: R must exist by then (a State may be written in between).
  if (r > p && (!g.node(r).is_leaf() || g.node(r).op == OpKind::State)) return -1;
  return norm;
}

const void* try_fold_gemm_residual(LowerCtx& c, NodeId p) {
  if (!env_bool("RLX_CUDA_GEMM_RESIDUAL")) return nullptr;
  const NodeId norm = residual_norm_pattern(c.graph, c.all_users(), p);
  if (norm < 0 || c.absorbed(norm) || c.folded_residual(norm)) return nullptr;
  const size_t x_input = c.node(norm).inputs[0] == p ? 0 : 1;
  const char* out = static_cast<const char*>(c.ptr(p));
  const char* r = static_cast<const char*>(c.in_ptr(norm, 1 - x_input));
  const int64_t bytes = static_numel(c.type(p).shape) * dtype_size(c.type(p).dtype);
  // cuBLASLt reads C and writes D in place only over the same layout: no partial overlap.
  if (r != out && r < out + bytes && out < r + bytes) return nullptr;
  c.fold_residual(norm, x_input);
  return r;
}

void register_matmul_lowerings() {
  register_cuda_float_lowering(
      OpKind::MatMul, {DType::F32, DType::F32, DType::F32},
      [](LowerCtx& c, NodeId id) {
        const auto& a = c.node(id).attr<MatMulAttrs>();
        lower_matmul_like(c, id, a.transpose_a, a.transpose_b, -1, Activation::None, try_fold_gemm_residual(c, id));
      },
      "cuBLASLt matmul");
  for (DType bias : {DType::F32, DType::F16, DType::BF16}) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      register_cuda_lowering(
          OpKind::FusedMatMulBiasAct, {t, t, bias, t},
          [](LowerCtx& c, NodeId id) {
            if (try_lower_ffn_ln(c, id) || try_lower_gemm_layer_norm(c, id) || try_lower_qkv_attention(c, id)) return;
            const auto& a = c.node(id).attr<FusedMatMulBiasActAttrs>();
            lower_matmul_like(c, id, false, a.transpose_b, c.node(id).inputs[2], a.act,
                              try_fold_gemm_residual(c, id));
          },
          str("cuBLASLt matmul+bias+act [", dtype_name(t), "]"));
    }
  }
  for (DType a : {DType::F8E4M3, DType::F8E5M2})
    for (DType b : {DType::F8E4M3, DType::F8E5M2})
      for (DType out : {DType::F32, DType::F16, DType::BF16}) {
        const std::string what = str("fp8 matmul [", dtype_name(a), " x ", dtype_name(b), " -> ", dtype_name(out),
                                     "] (cuBLASLt fp8, else an f32 fallback)");
        register_cuda_lowering(OpKind::ScaledMatMul, {a, b, DType::F32, DType::F32, out}, lower_scaled_matmul, what);
        register_cuda_lowering(OpKind::ScaledMatMul, {a, b, DType::F32, DType::F32, out, out}, lower_scaled_matmul,
                               what + " + bias");
      }
}

}  // namespace rlx::cuda
