// Unary, Binary, Compare, Where, Cast → the elementwise kernel family.
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/persistent.h"

namespace rlx::cuda {
namespace {

constexpr DType kNumeric[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};

void lower_unary(LowerCtx& c, NodeId id) {
  const UnaryFn fn = c.node(id).attr<UnaryAttrs>().fn;
  const DType dt = c.type(id).dtype;
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  const int64_t n = static_numel(c.type(id).shape);
  c.add(id, str("unary ", unary_name(fn), " ", dtype_name(dt)), [=](cudaStream_t s) { launch_unary(fn, dt, x, y, n, s); });
}

// A one-row float Binary (b the same size, or a scalar) or Cast as a local op
// of the persistent decode kernel, or null.
std::shared_ptr<const PersistentOps> persistent_elementwise(PKind kind, PBinFn fn, DType at, const void* a, int64_t na,
                                                            const void* b, int64_t nb, DType yt, void* y, int64_t n) {
  PFloat af, yf;
  if (!persistent_enabled() || n < 1 || n > kPersistentMaxLocal || na != n || !to_pfloat(at, &af) || !to_pfloat(yt, &yf))
    return nullptr;
  if (kind == PKind::Binary && nb != n && nb != 1) return nullptr;
  PersistentOp p;
  p.op.kind = kind;
  p.op.bin = PBinary{fn, n, nb};
  p.op.in[0] = PIn{a, -1, af};
  p.in_bytes[0] = static_cast<size_t>(n) * pfloat_bytes(af);
  p.reads.push_back({a, p.in_bytes[0]});
  if (kind == PKind::Binary) {
    p.op.in[1] = PIn{b, -1, af};
    p.in_bytes[1] = static_cast<size_t>(nb) * pfloat_bytes(af);
    p.reads.push_back({b, p.in_bytes[1]});
  }
  p.op.out[0] = POut{y, -1, yf};
  p.out_elems[0] = n;
  p.writes.push_back({y, static_cast<size_t>(n) * pfloat_bytes(yf)});
  return single_persistent_op(std::move(p));
}

std::shared_ptr<const PersistentOps> persistent_binary(BinaryFn fn, DType dt, const void* a, int64_t na, const void* b,
                                                       int64_t nb, void* y, int64_t n) {
  PBinFn f;
  switch (fn) {
    case BinaryFn::Add: f = PBinFn::Add; break;
    case BinaryFn::Sub: f = PBinFn::Sub; break;
    case BinaryFn::Mul: f = PBinFn::Mul; break;
    case BinaryFn::Div: f = PBinFn::Div; break;
    default: return nullptr;
  }
  return persistent_elementwise(PKind::Binary, f, dt, a, na, b, nb, dt, y, n);
}

void lower_binary(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const BinaryFn fn = n.attr<BinaryAttrs>().fn;
  const DType dt = n.type.dtype;
  const StridedShape shape = make_broadcast(c.dims(id), c.dims(n.inputs[0]), c.dims(n.inputs[1]));
  const void* a = c.in_ptr(id, 0);
  const void* b = c.in_ptr(id, 1);
  void* y = c.ptr(id);
  c.add(id, str("binary ", binary_name(fn), " ", dtype_name(dt)),
        [=](cudaStream_t s) { launch_binary(fn, dt, a, b, y, shape, s); },
        persistent_binary(fn, dt, a, static_numel(c.type(n.inputs[0]).shape), b, static_numel(c.type(n.inputs[1]).shape),
                          y, static_numel(n.type.shape)));
}

void lower_compare(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const CompareFn fn = n.attr<CompareAttrs>().fn;
  const DType dt = c.type(n.inputs[0]).dtype;
  const StridedShape shape = make_broadcast(c.dims(id), c.dims(n.inputs[0]), c.dims(n.inputs[1]));
  const void* a = c.in_ptr(id, 0);
  const void* b = c.in_ptr(id, 1);
  auto* y = static_cast<uint8_t*>(c.ptr(id));
  c.add(id, str("compare ", compare_name(fn), " ", dtype_name(dt)),
        [=](cudaStream_t s) { launch_compare(fn, dt, a, b, y, shape, s); });
}

void lower_where(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const DType dt = n.type.dtype;
  const auto cd = c.dims(n.inputs[0]);
  const auto bd = c.dims(n.inputs[2]);
  const StridedShape shape = make_broadcast(c.dims(id), cd, c.dims(n.inputs[1]), &bd);
  const auto* cond = static_cast<const uint8_t*>(c.in_ptr(id, 0));
  const void* a = c.in_ptr(id, 1);
  const void* b = c.in_ptr(id, 2);
  void* y = c.ptr(id);
  c.add(id, str("where ", dtype_name(dt)), [=](cudaStream_t s) { launch_where(dt, cond, a, b, y, shape, s); });
}

void lower_cast(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const DType from = c.type(n.inputs[0]).dtype, to = n.type.dtype;
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  const int64_t count = static_numel(n.type.shape);
  c.add(id, str("cast ", dtype_name(from), "->", dtype_name(to)), [=](cudaStream_t s) { launch_cast(from, to, x, y, count, s); },
        persistent_elementwise(PKind::Cast, PBinFn::Add, from, x, count, nullptr, 0, to, y, count));
}

}  // namespace

void register_elementwise_lowerings() {
  register_cuda_float_lowering(OpKind::Unary, {DType::F32, DType::F32}, lower_unary, "unary");
  for (DType t : kNumeric) {
    register_cuda_lowering(OpKind::Binary, {t, t, t}, lower_binary, str("binary [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::Where, {DType::Bool, t, t, t}, lower_where, str("where [", dtype_name(t), "]"));
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
    register_cuda_lowering(OpKind::Compare, {t, t, DType::Bool}, lower_compare, str("compare [", dtype_name(t), "]"));
  register_cuda_lowering(OpKind::Cast, {kAnyDType, kAnyDType}, lower_cast, "cast");
}

}  // namespace rlx::cuda
