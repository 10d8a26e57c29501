// DequantMatMul and Gather from a quantized table → kernels/quant.cu.
//
// DequantMatMul (x [..., K] in f32/f16/bf16, W [N, K] GGUF rows):
//   m ≤ 8 rows of x (decode): the fused GEMV, which reads W once and never
//     expands it ("gemv <type> m=<m>"), unless calibration measured the path
//     below faster near this shape. RLX_CUDA_<TYPE>_FUSED_DISABLE=1 always
//     sends these through the path below. When the product's only reader is a
//     FusedGeGLU/FusedSwiGLU, the GEMV applies it too ("gemv ... + geglu").
//     Weights of 24 MB and more (4 MB with m ≥ 2) take the shared-memory
//     streaming GEMV instead ("gemv-staged"; RLX_CUDA_GEMV_STAGED=0: never).
//   larger m (prefill): W is dequantized, a tile of its rows at a time, into
//     the node's workspace in x's dtype, and cuBLASLt multiplies x by the
//     tile into the matching columns of y ("dequant+cublaslt <type>"). On
//     Hopper, f16/bf16 x goes instead to rlx's wgmma GEMM with W decoded into
//     its register operand ("qgemm-sm90 <type>", kernels/qgemm_sm90.cu)
//     where it was measured faster (RLX_CUDA_QGEMM=auto, the default), or
//     wherever it can run (=1); where it is not used, the dequantize path's
//     report line says why.
// Gather(table [V, ...] quant, ids) → dequantized f32 rows, bad ids flagged.
//   The Cast to f16/bf16 and the Mul by a one-element constant that follow an
//   embedding lookup in the LLM builders (Gemma's √hidden scale) fold into
//   the gather's launch (RLX_CUDA_FUSE_GATHER_SCALE): a decode step starts
//   with one kernel instead of three before its first norm.
#include <cctype>
#include <optional>

#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

// Dequantized-weight workspace per tile: large enough that cuBLASLt sees
// big GEMMs, small enough not to matter next to the weights.
constexpr int64_t kTileBudgetBytes = int64_t{64} << 20;

// RLX_CUDA_<TYPE>_FUSED_DISABLE for a quant type (float weights have no knob).
bool fused_disabled(DType w) {
  if (!is_quant(w)) return false;
  std::string name(dtype_name(w));
  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return env_bool(str("RLX_CUDA_", name, "_FUSED_DISABLE"));
}

// ---- fused GEMV or dequantize + cuBLASLt for m <= 8: calibrated ----------------
//
// The "gemv" calibration family times both paths per quant type at a few
// decode shapes (m = 1 and 8); a DequantMatMul with m <= 8 near a measured
// bucket takes the faster one. Without a close bucket the fused GEMV runs
// (it reads the weights once and needs no workspace).

constexpr const char* kFusedVariant = "fused_gemv";
constexpr const char* kDequantVariant = "dequant_cublaslt";
constexpr double kGemvBorrowDistance = 1.0;  // sum of |log2| ratios of (m, n, k)

struct GemvShape {
  int64_t n, k;
};
// A 7B-class projection and a small-model one (Gemma 3 270M's FFN down);
// K a multiple of every block size (256).
constexpr GemvShape kGemvShapes[] = {{4096, 4096}, {640, 2048}};
constexpr int64_t kGemvMs[] = {1, kMaxGemvRows};

std::string gemv_family(DType w) { return str("gemv.", dtype_name(w)); }

bool fused_gemv_wins(int device, DType wt, int64_t m, int64_t n, int64_t k, std::string* note) {
  const auto& cal = device_calibration(device);
  if (!cal) return true;
  double distance = 0;
  const ShapeBucket* b = cal->nearest(gemv_family(wt), {m, n, k}, &distance);
  if (!b || distance > kGemvBorrowDistance || !b->best()) return true;
  if (b->best()->variant == kFusedVariant) return true;
  *note = str(" (calibrated: dequant+cublaslt won at m=", b->shape[0], " n=", b->shape[1], " k=", b->shape[2], ")");
  return false;
}

std::vector<ShapeBucket> calibrate_gemv(CalibContext& ctx) {
  std::vector<DType> types;
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i)
    if (is_quant(static_cast<DType>(i)) && has_cuda_dequant_kernel(static_cast<DType>(i))) types.push_back(static_cast<DType>(i));
  stage_quant_tables();
  const size_t total = types.size() * std::size(kGemvShapes) * std::size(kGemvMs);
  size_t done = 0;
  std::vector<ShapeBucket> out;
  char* base = static_cast<char*>(ctx.scratch());
  auto align = [](int64_t b) { return (b + 255) / 256 * 256; };
  for (DType wt : types) {
    for (const GemvShape& sh : kGemvShapes) {
      if (sh.k % dtype_info(wt).block_elems != 0) continue;
      for (int64_t m : kGemvMs) {
        if (ctx.out_of_time()) return out;
        ctx.progress(static_cast<double>(done++) / static_cast<double>(total),
                     str("gemv ", dtype_name(wt), " m=", m, " n=", sh.n, " k=", sh.k));
        // Scratch: W (quantized; the scratch's byte pattern decodes to finite
        // values), x and y in f16, and the dequantized f16 weights.
        const int64_t w_bytes = dtype_bytes(wt, sh.n * sh.k);
        const int64_t x_off = align(w_bytes), y_off = x_off + align(m * sh.k * 2), deq_off = y_off + align(m * sh.n * 2);
        const uint8_t* w = reinterpret_cast<const uint8_t*>(base);
        const void* x = base + x_off;
        void* y = base + y_off;
        void* deq = base + deq_off;
        const auto need = static_cast<size_t>(deq_off + sh.n * sh.k * 2);
        RLX_CHECK(need <= ctx.scratch_bytes(), "calibrate: gemv ", dtype_name(wt), " needs ", need, " bytes of scratch");
        GemmArgs g;
        g.dtype = DType::F16;
        g.trans_b = true;
        g.M = m, g.N = sh.n, g.K = sh.k;
        g.A = x, g.lda = sh.k;
        g.B = deq, g.ldb = sh.k;
        g.C = y, g.ldc = sh.n;
        GemmEngine* engine = &ctx.gemm();
        engine->plan(g);
        const int64_t n = sh.n, k = sh.k;
        const std::vector<double> us = ctx.time_each_us({
            [=](cudaStream_t s) { launch_quant_gemv(wt, w, DType::F16, x, y, m, n, k, s); },
            [=](cudaStream_t s) {
              launch_dequantize(wt, w, DType::F16, deq, n * k, s);
              engine->run(g, s);
            },
        });
        ShapeBucket bucket;
        bucket.family = gemv_family(wt);
        bucket.shape = {m, sh.n, sh.k};
        const double flops = 2.0 * static_cast<double>(m * sh.n * sh.k);
        const double bytes = static_cast<double>(w_bytes + 2 * m * (sh.k + sh.n));
        const char* names[2] = {kFusedVariant, kDequantVariant};
        for (int v = 0; v < 2; ++v)
          bucket.variants.push_back(VariantTiming{names[v], us[static_cast<size_t>(v)], flops / (us[static_cast<size_t>(v)] * 1e3),
                                                  bytes / (us[static_cast<size_t>(v)] * 1e3), {}});
        out.push_back(std::move(bucket));
      }
    }
  }
  return out;
}

// The m = 1 GEMV as an op of the persistent decode kernel (persistent.h), or
// null where that kernel cannot take it.
std::shared_ptr<const PersistentOps> persistent_gemv(LowerCtx& c, DType wt, const uint8_t* w, DType xt, const void* x,
                                                     void* y, int64_t n, int64_t k, const GluKind* glu) {
  PFloat xf;
  if (!persistent_enabled() || !to_pfloat(xt, &xf) || k > kPersistentMaxGemvK || (glu && n % 2 != 0) ||
      !persistent_gemv_takes(wt, w, n, k))
    return nullptr;
  PersistentOp p;
  p.op.kind = PKind::Gemv;
  const int64_t items = glu ? n / 2 : n;
  const int64_t grid = c.props.sm_count;
  p.op.gemv = PGemv{w, static_cast<int32_t>(wt), glu ? static_cast<int32_t>(*glu) : -1, n, k, dtype_bytes(wt, k),
                    (items + grid - 1) / grid};
  const size_t es = pfloat_bytes(xf);
  p.op.in[0] = PIn{x, -1, xf};
  p.in_bytes[0] = static_cast<size_t>(k) * es;
  p.op.out[0] = POut{y, -1, xf};
  p.out_elems[0] = items;
  p.reads = {{x, p.in_bytes[0]}};
  p.writes = {{y, static_cast<size_t>(items) * es}};
  return single_persistent_op(std::move(p));
}

void lower_dequant_matmul(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const DType xt = c.type(n.inputs[0]).dtype, wt = c.type(n.inputs[1]).dtype;
  const auto wd = c.dims(n.inputs[1]);
  const int64_t N = wd[0], K = wd[1];
  const int64_t M = K > 0 ? static_numel(c.type(n.inputs[0]).shape) / K : 0;
  const void* x = c.in_ptr(id, 0);
  const auto* w = static_cast<const uint8_t*>(c.in_ptr(id, 1));
  void* y = c.ptr(id);
  if (M == 0 || N == 0) return;
  RLX_CHECK_AS(Unsupported, has_cuda_dequant_kernel(wt), c.graph.describe(id), ": no cuda decoder for ", wt);
  stage_quant_tables();  // host-synchronous: here, never inside a captured thunk
  const std::string tname(dtype_name(wt));

  std::string note;  // why a small m took the dequantize path, when calibration chose it
  if (M <= kMaxGemvRows && !fused_disabled(wt)) {
    if (fused_gemv_wins(c.props.index, wt, M, N, K, &note)) {
      // A GLU that is this product's only reader is computed by the GEMV
      // itself (W stacks [gate; up]); its node then has nothing left to do.
      static const bool fuse_glu = env_bool("RLX_CUDA_GEMV_GLU");
      const auto& users = c.users(id);
      const bool glu_ok = users.size() == 1 && quant_gemv_fuses_glu(wt, w, N, K);
      if (fuse_glu && glu_ok && N % 2 == 0) {
        const Node& g = c.node(users[0]);
        if ((g.op == OpKind::FusedGeGLU || g.op == OpKind::FusedSwiGLU) && g.inputs[0] == id &&
            g.type.dtype == xt) {
          const GluKind kind = g.op == OpKind::FusedSwiGLU            ? GluKind::SwiGLU
                               : g.attr<GluAttrs>().tanh_approx ? GluKind::GeGLUTanh
                                                                : GluKind::GeGLUErf;
          void* out = c.ptr(users[0]);
          c.absorb(users[0]);
          c.add(id, str("gemv ", tname, " m=", M, " + ", g.op == OpKind::FusedSwiGLU ? "swiglu" : "geglu", note),
                [=](cudaStream_t s) { launch_quant_gemv(wt, w, xt, x, out, M, N, K, s, &kind); },
                M == 1 ? persistent_gemv(c, wt, w, xt, x, out, N, K, &kind) : nullptr);
          return;
        }
      }
      // Large weights stream through shared memory (gemv_staged.cu): the
      // Gemma output head (178 MB, m = 1) in 62 µs instead of 104, 33-62 MB
      // 7B-class projections 12-24% faster; with m ≥ 2 it is 1.5–2.8× faster
      // from 4096 × 4096 up. Smaller m = 1 matrices stay on the
      // latency-tuned kernel (4096² Q8_0, 17.8 MB: 12.7 µs against 16.6).
      static const bool staged_on = env_bool("RLX_CUDA_GEMV_STAGED");
      const int64_t w_bytes = dtype_bytes(wt, N * K);
      if (staged_on && quant_gemv_staged_supported(wt) &&
          (w_bytes >= (int64_t{24} << 20) || (M >= 2 && w_bytes >= (int64_t{4} << 20)))) {
        c.add(id, str("gemv-staged ", tname, " m=", M, note),
              [=](cudaStream_t s) { launch_quant_gemv_staged(wt, w, xt, x, y, M, N, K, s); });
        return;
      }
      c.add(id, str("gemv ", tname, " m=", M, note), [=](cudaStream_t s) { launch_quant_gemv(wt, w, xt, x, y, M, N, K, s); },
            M == 1 ? persistent_gemv(c, wt, w, xt, x, y, N, K, nullptr) : nullptr);
      return;
    }
  }
  // Hopper: the wgmma GEMM that decodes W into registers, where it applies and wins.
  const std::string qgemm_mode = env_string("RLX_CUDA_QGEMM");  // read per lowering: tests A/B it
  RLX_CHECK_AS(InvalidArgument, qgemm_mode == "auto" || qgemm_mode == "1" || qgemm_mode == "0", "RLX_CUDA_QGEMM='",
               qgemm_mode, "': expected auto, 1 or 0");
  const char* qgemm_why = qgemm_mode == "0" ? "RLX_CUDA_QGEMM=0" : quant_gemm_sm90_unsupported(wt, xt, w, x, y, M, N, K);
  if (qgemm_why == nullptr && qgemm_mode == "auto" && !quant_gemm_sm90_preferred(wt, M, N, K, c.props.sm_count))
    qgemm_why = "not measured faster for this type and shape";
  if (qgemm_why == nullptr) {
    c.add(id, str("qgemm-sm90 ", tname, " m=", M, note),
          [=](cudaStream_t s) { launch_quant_gemm_sm90(wt, w, xt, x, y, M, N, K, s); });
    return;
  }
  if (note.empty() && (xt == DType::F16 || xt == DType::BF16)) note = str(" (qgemm-sm90: ", qgemm_why, ")");

  const size_t first_thunk = c.thunk_count();

  const int64_t es = dtype_size(xt), row_bytes = dtype_bytes(wt, K);
  // Tile rows: a multiple of 64 (keeps y's column offset 16-byte aligned), at least 64.
  const int64_t tile = std::min(N, std::max<int64_t>(64, kTileBudgetBytes / (K * es) / 64 * 64));
  c.need_workspace(static_cast<size_t>(tile * K * es));
  void* const* ws = c.workspace_slot();
  GemmEngine* engine = &c.gemm;
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    const int64_t rows = std::min(tile, N - n0);
    GemmArgs g;
    g.dtype = xt;
    g.trans_b = true;  // y[:, n0:n0+rows] = x · tileᵀ, the tile row-major [rows, K]
    g.M = M;
    g.N = rows;
    g.K = K;
    g.A = x;
    g.lda = K;
    // The workspace is allocated after lowering; plan with an address of the
    // same (256-byte) alignment, which is all the cached plan depends on.
    g.B = reinterpret_cast<const void*>(uintptr_t{256});
    g.ldb = K;
    g.C = static_cast<char*>(y) + n0 * es;
    g.ldc = N;
    g.allow_tf32 = c.options.allow_tf32;
    c.gemm.plan(g);
    const uint8_t* wtile = w + n0 * row_bytes;
    c.add(id, str("dequant+cublaslt ", tname, " m=", M, " n=", n0, "..", n0 + rows),
          [=](cudaStream_t s) {
            launch_dequantize(wt, wtile, xt, *ws, rows * K, s);
            GemmArgs call = g;
            call.B = *ws;
            engine->run(call, s);
          });
  }
  if (!note.empty()) c.note_thunks(first_thunk, note);
}

// G = Gather(table, idx) (quantized table, f32 rows) [→ C = Cast(G) to f16 /
// bf16] [→ M = Mul(C or G, s), s one element of a Constant or Param]: what
// one launch computes, written to the last node's block. The fused launch
// runs at that node's place (the chain's nodes are consecutive but for
// leaves), so idx must stay live until then (gather_scale_reads).
struct GatherScale {
  NodeId gather = -1, cast = -1, mul = -1, scale = -1, last = -1;
};

// The one user of `id`, if it has exactly one and is no graph output.
NodeId sole_user(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  const auto& u = users[static_cast<size_t>(id)];
  return u.size() == 1 && !is_graph_output(g, id) ? u[0] : -1;
}

std::optional<GatherScale> match_gather_scale(const Graph& g, const std::vector<std::vector<NodeId>>& users,
                                              NodeId id) {
  if (!env_bool("RLX_CUDA_FUSE_GATHER_SCALE")) return std::nullopt;
  const Node& n = g.node(id);
  if (n.op != OpKind::Gather || !is_quant(g.node(n.inputs[0]).type.dtype) || n.type.dtype != DType::F32)
    return std::nullopt;
  GatherScale m;
  m.gather = m.last = id;
  NodeId next = sole_user(g, users, id);
  if (next >= 0) {
    const Node& c = g.node(next);
    if (c.op == OpKind::Cast && (c.type.dtype == DType::F16 || c.type.dtype == DType::BF16)) {
      m.cast = m.last = next;
      next = sole_user(g, users, next);
    }
  }
  if (next >= 0) {
    const Node& mul = g.node(next);
    const DType t = g.node(m.last).type.dtype;
    if (mul.op == OpKind::Binary && mul.attr<BinaryAttrs>().fn == BinaryFn::Mul && mul.inputs.size() == 2 &&
        mul.type.dtype == t && mul.type.shape == g.node(m.last).type.shape) {
      const NodeId s = mul.inputs[0] == m.last ? mul.inputs[1] : mul.inputs[0];
      const Node& sn = g.node(s);
      const bool one = is_static(sn.type.shape) && static_numel(sn.type.shape) == 1;
      if (s != m.last && one && sn.type.dtype == t && (sn.op == OpKind::Constant || sn.op == OpKind::Param)) {
        m.mul = m.last = next;
        m.scale = s;
      }
    }
  }
  if (m.last == id) return std::nullopt;  // nothing to fold
  for (NodeId k = id + 1; k < m.last; ++k)
    if (k != m.cast && k != m.mul && !g.node(k).is_leaf()) return std::nullopt;
  return m;
}

void lower_quant_gather(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const DType tt = c.type(n.inputs[0]).dtype;
  const auto table = c.dims(n.inputs[0]);
  int64_t row_elems = 1;
  for (size_t i = 1; i < table.size(); ++i) row_elems *= table[i];
  const int64_t rows = table[0];
  RLX_CHECK_AS(Unsupported, row_elems % dtype_info(tt).block_elems == 0, c.graph.describe(id), ": rows of ",
               row_elems, " ", tt, " elements are not whole blocks of ", dtype_info(tt).block_elems);
  stage_quant_tables();
  const DType idt = c.type(n.inputs[1]).dtype;
  const int64_t n_idx = static_numel(c.type(n.inputs[1]).shape);
  const void* t = c.in_ptr(id, 0);
  const void* idx = c.in_ptr(id, 1);
  int32_t* const* flag = c.error_flag(id);
  const std::optional<GatherScale> m = match_gather_scale(c.graph, c.all_users(), id);
  if (!m) {
    void* y = c.ptr(id);
    c.add(id, str("gather ", dtype_name(tt), " rows (dequantized)"), [=](cudaStream_t s) {
      launch_quant_gather(tt, t, rows, row_elems, idt, idx, n_idx, DType::F32, y, nullptr, *flag, s);
    });
    return;
  }
  const DType yt = c.type(m->last).dtype;
  void* y = c.ptr(m->last);
  const void* scale = m->scale >= 0 ? c.ptr(m->scale) : nullptr;
  std::string what = str("gather ", dtype_name(tt), " rows (dequantized) -> ", dtype_name(yt));
  if (m->cast >= 0) {
    c.absorb(m->cast);
    what += str(" (%", m->cast, " cast");
  }
  if (m->mul >= 0) {
    c.absorb(m->mul);
    what += str(m->cast >= 0 ? ", " : " (", "%", m->mul, " scale");
  }
  c.add_at(m->last, id, what + " fused)", [=](cudaStream_t s) {
    launch_quant_gather(tt, t, rows, row_elems, idt, idx, n_idx, yt, y, scale, *flag, s);
  });
}

}  // namespace

std::vector<NodeId> gather_scale_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  for (NodeId k = id - 1; k >= 0 && k >= id - 8; --k)
    if (auto m = match_gather_scale(g, users, k); m && m->last == id) return {g.node(m->gather).inputs[1]};
  return {};
}

void register_quant_lowerings() {
  register_calibration_family("gemv", calibrate_gemv, 0.5);
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto wt = static_cast<DType>(i);
    if (!has_cuda_dequant_kernel(wt)) continue;
    const std::string tname(dtype_name(wt));
    for (DType xt : {DType::F32, DType::F16, DType::BF16})
      register_cuda_lowering(OpKind::DequantMatMul, {xt, wt, xt}, lower_dequant_matmul,
                             str("quantized matmul [", tname, " x ", dtype_name(xt),
                                 "]: fused gemv m<=8, else the sm90 quantized GEMM or dequant+cuBLASLt"));
    if (!is_quant(wt)) continue;  // float tables go through the plain gather
    for (DType it : {DType::I32, DType::I64})
      register_cuda_lowering(OpKind::Gather, {wt, it, DType::F32}, lower_quant_gather,
                             str("gather of ", tname, " rows, dequantized"));
  }
}

}  // namespace rlx::cuda
