#include "rlx/runtime/cost_model.h"

#include <algorithm>
#include <cmath>

#include "rlx/core/error.h"

namespace rlx {

using namespace units;

DeviceRates heuristic_gpu_rates() {
  // Round figures for an H100/H200 without calibration: a replayed graph node
  // costs ~2 us, a run's sync ~10 us; ~3 TB/s of the HBM is reachable; dense
  // GEMM reaches ~40 TFLOP/s in f32 (no TF32) and ~500 TFLOP/s in f16/bf16.
  DeviceRates r;
  r.device = "cuda";
  r.per_node = {2.0};
  r.per_run = {10.0};
  r.memory = {3000.0};
  r.host_link = {20.0};
  r.matmul_f32 = {40000.0};
  r.matmul_half = {500000.0};
  r.other = {20000.0};
  return r;
}

DeviceRates heuristic_cpu_rates(int threads) {
  // ~20 GFLOP/s of f32 GEMM per thread (AVX2 FMA, blocked), half storage
  // staged through f32 at half that; ~20 GB/s of memory bandwidth; a step of
  // the CPU program costs ~0.5 us; inputs are already in host memory.
  const double t = std::max(threads, 1);
  DeviceRates r;
  r.device = "cpu";
  r.per_node = {0.5};
  r.per_run = {0.0};
  r.memory = {20.0};
  r.host_link = {0.0};
  r.matmul_f32 = {20.0 * t};
  r.matmul_half = {10.0 * t};
  r.other = {1.0 * t};
  return r;
}

namespace {

bool is_gemm_family(const std::string& f, const char* dtype) { return f == str("gemm.", dtype); }

double best_gflops(const Calibration& c, std::initializer_list<const char*> dtypes) {
  double best = 0;
  for (const auto& b : c.buckets)
    for (const char* d : dtypes)
      if (is_gemm_family(b.family, d))
        if (const VariantTiming* v = b.best()) best = std::max(best, v->gflops);
  return best;
}

double tensor_bytes(const TensorType& t) {
  return static_cast<double>(dtype_bytes(t.dtype, static_numel(t.shape)));
}

double dims_product(const std::vector<int64_t>& s) {
  double p = 1;
  for (int64_t d : s) p *= static_cast<double>(std::max<int64_t>(d, 1));
  return p;
}

}  // namespace

DeviceRates gpu_rates_from(const Calibration& c, const std::string& device) {
  DeviceRates r = heuristic_gpu_rates();
  r.device = device;
  r.calibrated = true;
  if (c.graph_node_us > 0) r.per_node = {c.graph_node_us};
  else if (c.launch_us > 0) r.per_node = {c.launch_us};
  if (c.sync_us > 0) r.per_run = {c.sync_us + c.launch_us};
  if (c.d2d_gbps > 0) r.memory = {c.d2d_gbps};
  if (c.h2d_gbps > 0 && c.d2h_gbps > 0) r.host_link = {std::min(c.h2d_gbps, c.d2h_gbps)};
  if (double g = best_gflops(c, {"f32"}); g > 0) r.matmul_f32 = {g};
  if (double g = best_gflops(c, {"f16", "bf16"}); g > 0) r.matmul_half = {g};
  return r;
}

NodeWork node_work(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  NodeWork w;
  if (n.is_leaf() || n.op == OpKind::Reshape || n.op == OpKind::Bitcast) return w;  // no kernel: views
  double in_bytes = 0;
  for (NodeId i : n.inputs) in_bytes += tensor_bytes(g.node(i).type);
  const double out_bytes = tensor_bytes(n.type);
  const double out_numel = static_cast<double>(static_numel(n.type.shape));
  w.bytes = {in_bytes + out_bytes};
  switch (n.op) {
    case OpKind::MatMul:
    case OpKind::FusedMatMulBiasAct:
    case OpKind::DequantMatMul:
    case OpKind::ScaledMatMul: {
      const auto a = static_dims(g.node(n.inputs[0]).type.shape);
      const bool ta = n.op == OpKind::MatMul && n.attr<MatMulAttrs>().transpose_a;
      const double k = static_cast<double>(ta ? a[a.size() - 2] : a.back());
      w.kind = NodeWork::Kind::Matmul;
      w.flops = {2.0 * out_numel * k};
      break;
    }
    case OpKind::Attention: {
      const auto& at = n.attr<AttentionAttrs>();
      const auto q = static_dims(g.node(n.inputs[0]).type.shape);
      const auto k = static_dims(g.node(n.inputs[1]).type.shape);
      const double lq = static_cast<double>(q[1]), lk = static_cast<double>(k[1]);
      double f = 4.0 * static_cast<double>(q[0]) * at.num_heads * lq * lk * at.head_dim;  // QKᵀ and PV
      if (at.mask == MaskKind::Causal && lq == lk) f *= 0.5;  // about half the scores are masked
      w.kind = NodeWork::Kind::Attention;
      w.flops = {f};
      break;
    }
    default:
      w.kind = NodeWork::Kind::Other;
      w.flops = {out_numel};
      break;
  }
  return w;
}

CostModel::CostModel(DeviceRates rates, std::optional<Calibration> calibration)
    : rates_(std::move(rates)), calib_(std::move(calibration)) {}

GflopRate CostModel::matmul_rate(DType dtype, int64_t m, int64_t n, int64_t k) const {
  const bool half = dtype == DType::F16 || dtype == DType::BF16;
  if (calib_ && (half || dtype == DType::F32)) {
    double dist = 0;
    if (const ShapeBucket* b = calib_->nearest(str("gemm.", dtype_name(dtype)), {m, n, k}, &dist))
      if (const VariantTiming* v = b->best(); v && v->gflops > 0) return {v->gflops};
  }
  return half ? rates_.matmul_half : rates_.matmul_f32;
}

Micros CostModel::predict_node(const Graph& g, NodeId id) const {
  const NodeWork w = node_work(g, id);
  if (w.kind == NodeWork::Kind::None) return {0.0};
  const Node& n = g.node(id);
  GflopRate rate = rates_.other;
  if (w.kind == NodeWork::Kind::Matmul) {
    const auto o = static_dims(n.type.shape);
    const int64_t cols = o.back();
    const int64_t rows = cols ? static_numel(n.type.shape) / cols : 0;
    const int64_t k = cols && rows ? static_cast<int64_t>(w.flops.value / (2.0 * rows * cols)) : 0;
    // Quantized weights run as f16 compute on the GPU; fp8 runs at least at the f16 rate (priced so).
    const bool half = n.op == OpKind::DequantMatMul || n.op == OpKind::ScaledMatMul;
    rate = matmul_rate(half ? DType::F16 : n.type.dtype, rows, cols, k);
  } else if (w.kind == NodeWork::Kind::Attention) {
    const bool half = n.type.dtype == DType::F16 || n.type.dtype == DType::BF16;
    rate = {0.3 * (half ? rates_.matmul_half : rates_.matmul_f32).value};  // softmax between two GEMMs
    if (calib_) {
      const auto& at = n.attr<AttentionAttrs>();
      const auto q = static_dims(g.node(n.inputs[0]).type.shape);
      const auto k = static_dims(g.node(n.inputs[1]).type.shape);
      if (const ShapeBucket* b = calib_->nearest(str("attention.", dtype_name(n.type.dtype)),
                                                 {q[0] * at.num_heads, q[1], k[1], at.head_dim}))
        if (b->best()->gflops > 0) rate = {b->best()->gflops};
    }
  }
  return rates_.per_node + max(w.flops / rate, w.bytes / rates_.memory);
}

Micros CostModel::predict_graph(const Graph& g) const {
  Micros t = rates_.per_run;
  for (NodeId i = 0; i < g.size(); ++i) t += predict_node(g, i);
  if (rates_.host_link.value > 0) {
    double io = 0;
    for (NodeId i : g.leaves(OpKind::Input)) io += tensor_bytes(g.node(i).type);
    for (const auto& [_, o] : g.outputs()) io += tensor_bytes(g.node(o).type);
    t += Bytes{io} / rates_.host_link;
  }
  return t;
}

std::optional<CostModel::Choice> CostModel::choose_variant(const std::string& family, const std::vector<int64_t>& shape,
                                                           double max_distance) const {
  if (!calib_) return std::nullopt;
  double dist = 0;
  const ShapeBucket* b = calib_->nearest(family, shape, &dist);
  if (!b || dist > max_distance) return std::nullopt;
  const VariantTiming* v = b->best();
  return Choice{v, b, Micros{v->us * dims_product(shape) / dims_product(b->shape)}};
}

DeviceChoice choose_device(const Graph& g, const CostModel& cpu, const CostModel& gpu) {
  DeviceChoice c;
  c.cpu = cpu.predict_graph(g);
  c.gpu = gpu.predict_graph(g);
  c.use_gpu = c.gpu.value <= c.cpu.value;
  c.reason = str(c.use_gpu ? "gpu" : "cpu", ": predicted cpu ", c.cpu.value, " us (",
                 cpu.rates().calibrated ? "measured" : "heuristic", " rates), ", gpu.rates().device, " ", c.gpu.value,
                 " us (", gpu.rates().calibrated ? "calibrated" : "heuristic", " rates)");
  return c;
}

}  // namespace rlx
