// Shape and dtype inference: one function per op family. Dims compare
// structurally: equal static sizes or the same symbol; a static 1 broadcasts.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "rlx/core/error.h"
#include "rlx/ir/custom_op.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

struct Ctx {
  const Graph& g;
  const std::vector<NodeId>& in;
  const std::string& where;

  const TensorType& type(size_t i) const { return g.node(in[i]).type; }
  const Shape& shape(size_t i) const { return type(i).shape; }
  DType dtype(size_t i) const { return type(i).dtype; }
  void arity(size_t lo, size_t hi) const {
    RLX_SHAPE_CHECK(in.size() >= lo && in.size() <= hi, where, ": expects ", lo == hi ? str(lo) : str(lo, "..", hi),
                    " inputs, got ", in.size());
  }
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw ShapeError(str(where, ": ", std::forward<Args>(args)...));
  }
  void check(bool ok, const std::string& msg) const {
    if (!ok) fail(msg);
  }
  void float_input(size_t i) const {
    if (!is_float(dtype(i)) || dtype(i) == DType::F8E4M3 || dtype(i) == DType::F8E5M2)
      fail("input ", i, " must be f32/f16/bf16/f64, got ", dtype(i));
  }
  void same_dtype(size_t i, size_t j) const {
    if (dtype(i) != dtype(j)) fail("input ", j, " has dtype ", dtype(j), " but input ", i, " has ", dtype(i));
  }
  int axis(int a, int rank) const {
    if (a < -rank || a >= rank) fail("axis ", a, " out of range for rank ", rank);
    return a < 0 ? a + rank : a;
  }
  bool dims_equal(const Dim& a, const Dim& b) const { return a == b; }
  void expect_dim(const Dim& got, const Dim& want, const std::string& what) const {
    if (!(got == want)) fail(what, " is ", got.to_string(), " but must equal ", want.to_string());
  }
};

Shape broadcast(const Ctx& c, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim one(1);
    const Dim& da = i < r - a.size() ? one : a[i - (r - a.size())];
    const Dim& db = i < r - b.size() ? one : b[i - (r - b.size())];
    if (da == db || db == one) out[i] = da;
    else if (da == one) out[i] = db;
    else c.fail("shapes ", shape_to_string(a), " and ", shape_to_string(b), " do not broadcast (dim ", i, ")");
  }
  return out;
}

TensorType infer_elementwise(const Ctx& c, OpKind op, const Attrs& attrs) {
  switch (op) {
    case OpKind::Unary:
      c.arity(1, 1);
      c.float_input(0);
      return c.type(0);
    case OpKind::Binary: {
      c.arity(2, 2);
      c.same_dtype(0, 1);
      DType t = c.dtype(0);
      if (!is_float(t) && !is_int(t)) c.fail("binary ops need numeric inputs, got ", t);
      if (std::get<BinaryAttrs>(attrs).fn == BinaryFn::Pow) c.float_input(0);
      return {t, broadcast(c, c.shape(0), c.shape(1))};
    }
    case OpKind::Compare:
      c.arity(2, 2);
      c.same_dtype(0, 1);
      return {DType::Bool, broadcast(c, c.shape(0), c.shape(1))};
    case OpKind::Where:
      c.arity(3, 3);
      if (c.dtype(0) != DType::Bool) c.fail("condition must be bool, got ", c.dtype(0));
      c.same_dtype(1, 2);
      return {c.dtype(1), broadcast(c, broadcast(c, c.shape(0), c.shape(1)), c.shape(2))};
    case OpKind::Cast: {
      c.arity(1, 1);
      DType to = std::get<CastAttrs>(attrs).to;
      if (is_quant(to) || is_quant(c.dtype(0))) c.fail("cannot cast between ", c.dtype(0), " and ", to);
      return {to, c.shape(0)};
    }
    default: c.fail("not elementwise");
  }
}

// Batched matmul: A [..., M, K], B [..., K, N] after transposes.
TensorType infer_matmul(const Ctx& c, bool ta, bool tb) {
  const Shape& a = c.shape(0);
  const Shape& b = c.shape(1);
  if (a.size() < 2 || b.size() < 2) c.fail("matmul needs rank >= 2 operands, got ", shape_to_string(a), " and ", shape_to_string(b));
  c.float_input(0);
  c.same_dtype(0, 1);
  const Dim& m = ta ? a[a.size() - 1] : a[a.size() - 2];
  const Dim& ka = ta ? a[a.size() - 2] : a[a.size() - 1];
  const Dim& kb = tb ? b[b.size() - 1] : b[b.size() - 2];
  const Dim& n = tb ? b[b.size() - 2] : b[b.size() - 1];
  if (!(ka == kb)) c.fail("inner dims differ: A ", shape_to_string(a), " has K=", ka.to_string(), ", B ", shape_to_string(b), " has K=", kb.to_string());
  Shape batch = broadcast(c, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  batch.push_back(m);
  batch.push_back(n);
  return {c.dtype(0), batch};
}

TensorType infer_norm(const Ctx& c, OpKind op) {
  const bool residual = op == OpKind::FusedResidualLayerNorm || op == OpKind::FusedResidualRmsNorm;
  const bool layer = op == OpKind::LayerNorm || op == OpKind::FusedResidualLayerNorm;
  const size_t n = (layer ? 3 : 2) + (residual ? 1 : 0);
  c.arity(n, n);
  c.float_input(0);
  const Shape& x = c.shape(0);
  if (x.empty()) c.fail("norm input must have rank >= 1");
  if (residual) {
    if (!(c.type(1) == c.type(0))) c.fail("residual ", c.type(1).to_string(), " must match x ", c.type(0).to_string());
  }
  for (size_t i = residual ? 2 : 1; i < n; ++i) {
    c.float_input(i);
    if (c.shape(i).size() != 1) c.fail("input ", i, " (gamma/beta) must be 1-D, got ", shape_to_string(c.shape(i)));
    c.expect_dim(c.shape(i)[0], x.back(), str("input ", i, " length"));
  }
  return c.type(0);
}

// FusedPostRmsNorm: x, a, w1 [, w2] → x + rms_norm(a, w1) [stacked with rms_norm of that by w2].
TensorType infer_post_rms_norm(const Ctx& c) {
  c.arity(3, 4);
  c.float_input(0);
  const Shape& x = c.shape(0);
  if (x.empty()) c.fail("x must have rank >= 1");
  if (!(c.type(1) == c.type(0))) c.fail("a ", c.type(1).to_string(), " must match x ", c.type(0).to_string());
  for (size_t i = 2; i < c.in.size(); ++i) {
    c.float_input(i);
    if (c.shape(i).size() != 1) c.fail("input ", i, " (weight) must be 1-D, got ", shape_to_string(c.shape(i)));
    c.expect_dim(c.shape(i)[0], x.back(), str("input ", i, " length"));
  }
  if (c.in.size() == 3) return c.type(0);
  Shape stacked{Dim(2)};
  stacked.insert(stacked.end(), x.begin(), x.end());
  return {c.dtype(0), stacked};
}

TensorType infer_reduce_like(const Ctx& c, OpKind op, const Attrs& attrs) {
  switch (op) {
    case OpKind::Softmax: {
      c.arity(1, 1);
      c.float_input(0);
      c.axis(std::get<AxisAttrs>(attrs).axis, c.type(0).rank());
      return c.type(0);
    }
    case OpKind::Reduce: {
      c.arity(1, 1);
      const auto& a = std::get<ReduceAttrs>(attrs);
      if (!is_float(c.dtype(0)) && !is_int(c.dtype(0))) c.fail("reduce needs numeric input, got ", c.dtype(0));
      int r = c.type(0).rank();
      std::vector<bool> reduced(static_cast<size_t>(r), false);
      if (a.axes.empty()) c.fail("reduce needs at least one axis");
      for (int ax : a.axes) {
        int k = c.axis(ax, r);
        if (reduced[static_cast<size_t>(k)]) c.fail("axis ", ax, " listed twice");
        reduced[static_cast<size_t>(k)] = true;
      }
      Shape out;
      for (int i = 0; i < r; ++i) {
        if (!reduced[static_cast<size_t>(i)]) out.push_back(c.shape(0)[static_cast<size_t>(i)]);
        else if (a.keepdims) out.push_back(Dim(1));
      }
      return {c.dtype(0), out};
    }
    case OpKind::ArgMax: {
      c.arity(1, 1);
      const auto& a = std::get<ArgMaxAttrs>(attrs);
      int k = c.axis(a.axis, c.type(0).rank());
      Shape out = c.shape(0);
      if (a.keepdims) out[static_cast<size_t>(k)] = Dim(1);
      else out.erase(out.begin() + k);
      return {DType::I32, out};
    }
    case OpKind::TopK: {
      c.arity(1, 1);
      c.float_input(0);
      const auto& a = std::get<TopKAttrs>(attrs);
      Shape out = c.shape(0);
      if (out.empty()) c.fail("topk needs rank >= 1");
      if (a.k < 1) c.fail("k must be >= 1, got ", a.k);
      if (out.back().is_static() && a.k > out.back().value) c.fail("k=", a.k, " exceeds the last dim ", out.back().value);
      out.back() = Dim(a.k);
      return {a.indices ? DType::I32 : c.dtype(0), out};
    }
    case OpKind::Sample: {
      c.arity(1, 2);
      c.float_input(0);
      const auto& a = std::get<SampleAttrs>(attrs);
      if (c.shape(0).size() != 2) c.fail("logits must be [B, V], got ", shape_to_string(c.shape(0)));
      if (!(a.temperature >= 0.0f)) c.fail("temperature must be >= 0, got ", a.temperature);
      if (a.top_k < 0) c.fail("top_k must be >= 0, got ", a.top_k);
      if (!(a.top_p > 0.0f && a.top_p <= 1.0f)) c.fail("top_p must be in (0, 1], got ", a.top_p);
      if (c.in.size() == 2 && (c.dtype(1) != DType::I32)) c.fail("step input must be i32");
      return {DType::I32, {c.shape(0)[0]}};
    }
    default: c.fail("not a reduction");
  }
}

TensorType infer_rope_write(const Ctx& c, const WriteSliceAttrs& w);  // below, next to infer_rope

TensorType infer_movement(const Ctx& c, OpKind op, const Attrs& attrs) {
  switch (op) {
    case OpKind::Gather: {
      c.arity(2, 2);
      const Shape& table = c.shape(0);
      if (table.empty()) c.fail("gather table must have rank >= 1");
      if (c.dtype(1) != DType::I32 && c.dtype(1) != DType::I64) c.fail("indices must be i32 or i64, got ", c.dtype(1));
      Shape out = c.shape(1);
      out.insert(out.end(), table.begin() + 1, table.end());
      // Rows of a packed quant table come out dequantized.
      return {is_quant(c.dtype(0)) ? DType::F32 : c.dtype(0), out};
    }
    case OpKind::Reshape: {
      c.arity(1, 1);
      Shape target = std::get<ShapeAttrs>(attrs).shape;
      const Shape& src = c.shape(0);
      int infer_at = -1;
      for (size_t i = 0; i < target.size(); ++i) {
        if (target[i].is_static() && target[i].value == -1) {
          if (infer_at >= 0) c.fail("reshape target has more than one -1");
          infer_at = static_cast<int>(i);
        } else if (target[i].is_static() && target[i].value < 0) {
          c.fail("reshape target dim ", target[i].value, " is negative");
        }
      }
      if (infer_at >= 0) {
        Shape rest = target;
        rest.erase(rest.begin() + infer_at);
        if (!is_static(src) || !is_static(rest)) c.fail("reshape with -1 needs static shapes");
        int64_t n = static_numel(src), m = static_numel(rest);
        if (m == 0 || n % m != 0) c.fail("cannot reshape ", shape_to_string(src), " to ", shape_to_string(target));
        target[static_cast<size_t>(infer_at)] = Dim(n / m);
      }
      if (is_static(src) && is_static(target)) {
        if (static_numel(src) != static_numel(target))
          c.fail("cannot reshape ", shape_to_string(src), " (", static_numel(src), " elements) to ", shape_to_string(target));
      } else {
        // Symbolic: the multisets of symbols must agree and the static parts' products must match.
        auto split = [](const Shape& s, std::vector<std::string>& syms) {
          int64_t p = 1;
          for (const auto& d : s) {
            if (d.is_static()) p *= d.value;
            else syms.push_back(d.symbol);
          }
          std::sort(syms.begin(), syms.end());
          return p;
        };
        std::vector<std::string> s1, s2;
        if (split(src, s1) != split(target, s2) || s1 != s2)
          c.fail("cannot reshape ", shape_to_string(src), " to ", shape_to_string(target));
      }
      return {c.dtype(0), target};
    }
    case OpKind::Transpose: {
      c.arity(1, 1);
      const auto& perm = std::get<TransposeAttrs>(attrs).perm;
      int r = c.type(0).rank();
      if (static_cast<int>(perm.size()) != r) c.fail("perm has ", perm.size(), " entries for rank ", r);
      std::vector<bool> seen(static_cast<size_t>(r), false);
      Shape out;
      for (int p : perm) {
        if (p < 0 || p >= r || seen[static_cast<size_t>(p)]) c.fail("perm is not a permutation of 0..", r - 1);
        seen[static_cast<size_t>(p)] = true;
        out.push_back(c.shape(0)[static_cast<size_t>(p)]);
      }
      return {c.dtype(0), out};
    }
    case OpKind::Narrow: {
      c.arity(1, 1);
      const auto& a = std::get<NarrowAttrs>(attrs);
      int ax = c.axis(a.axis, c.type(0).rank());
      const Dim& d = c.shape(0)[static_cast<size_t>(ax)];
      if (a.length < 1 || (a.start < 0 && a.start + a.length > 0))
        c.fail("narrow start ", a.start, " length ", a.length, " invalid");
      if (d.is_static() && (a.start < 0 ? -a.start > d.value : a.start + a.length > d.value))
        c.fail("narrow [", a.start, ", ", a.start + a.length, ") exceeds dim ", d.value);
      Shape out = c.shape(0);
      out[static_cast<size_t>(ax)] = Dim(a.length);
      return {c.dtype(0), out};
    }
    case OpKind::Concat: {
      if (c.in.empty()) c.fail("concat needs at least one input");
      int r = c.type(0).rank();
      int ax = c.axis(std::get<AxisAttrs>(attrs).axis, r);
      Shape out = c.shape(0);
      int64_t total = 0;
      for (size_t i = 0; i < c.in.size(); ++i) {
        c.same_dtype(0, i);
        if (c.type(i).rank() != r) c.fail("input ", i, " has rank ", c.type(i).rank(), ", expected ", r);
        for (int k = 0; k < r; ++k) {
          if (k == ax) continue;
          c.expect_dim(c.shape(i)[static_cast<size_t>(k)], out[static_cast<size_t>(k)], str("input ", i, " dim ", k));
        }
        const Dim& d = c.shape(i)[static_cast<size_t>(ax)];
        if (!d.is_static()) c.fail("concat along symbolic dim ", d.symbol, " is not supported");
        total += d.value;
      }
      out[static_cast<size_t>(ax)] = Dim(total);
      return {c.dtype(0), out};
    }
    case OpKind::Expand: {
      c.arity(1, 1);
      const Shape& target = std::get<ShapeAttrs>(attrs).shape;
      const Shape& src = c.shape(0);
      if (target.size() < src.size()) c.fail("expand target ", shape_to_string(target), " has lower rank than ", shape_to_string(src));
      size_t off = target.size() - src.size();
      for (size_t i = 0; i < src.size(); ++i)
        if (!(src[i] == target[off + i]) && !(src[i] == Dim(1)))
          c.fail("cannot expand ", shape_to_string(src), " to ", shape_to_string(target));
      return {c.dtype(0), target};
    }
    case OpKind::WriteSlice: {
      if (std::get<WriteSliceAttrs>(attrs).rope) return infer_rope_write(c, std::get<WriteSliceAttrs>(attrs));
      c.arity(3, 3);
      if (c.g.node(c.in[0]).op != OpKind::State && c.g.node(c.in[0]).op != OpKind::WriteSlice)
        c.fail("first input must be a State (or a WriteSlice of one)");
      // A float update may be stored in another float type (f32 → f16 KV cache).
      if (c.dtype(0) != c.dtype(1) && !(is_compute_float(c.dtype(0)) && is_compute_float(c.dtype(1))))
        c.fail("update dtype ", c.dtype(1), " differs from state dtype ", c.dtype(0),
               " (only f32/f16/bf16 convert on write)");
      int r = c.type(0).rank();
      int ax = c.axis(std::get<WriteSliceAttrs>(attrs).axis, r);
      if (c.type(1).rank() != r) c.fail("update rank ", c.type(1).rank(), " differs from state rank ", r);
      for (int k = 0; k < r; ++k) {
        const Dim& u = c.shape(1)[static_cast<size_t>(k)];
        const Dim& s = c.shape(0)[static_cast<size_t>(k)];
        if (k == ax) {
          if (u.is_static() && s.is_static() && u.value > s.value) c.fail("update is longer than the state along axis ", ax);
        } else {
          c.expect_dim(u, s, str("update dim ", k));
        }
      }
      if (c.dtype(2) != DType::I32) c.fail("offset must be i32, got ", c.dtype(2));
      return c.type(0);
    }
    default: c.fail("not a data-movement op");
  }
}

TensorType infer_attention(const Ctx& c, const AttentionAttrs& a) {
  const bool extra = a.mask == MaskKind::Custom || a.mask == MaskKind::Bias;
  const size_t arity = 3 + (extra ? 1 : 0) + (a.kv_len_input ? 1 : 0);
  c.arity(arity, arity);
  c.float_input(0);
  c.same_dtype(0, 1);
  c.same_dtype(0, 2);
  if (a.num_heads < 1 || a.num_kv_heads < 1 || a.num_heads % a.num_kv_heads != 0)
    c.fail("num_heads ", a.num_heads, " must be a positive multiple of num_kv_heads ", a.num_kv_heads);
  if (a.head_dim < 1) c.fail("head_dim must be positive");
  if (a.mask == MaskKind::SlidingWindow && a.window < 1) c.fail("sliding window needs window >= 1");
  if (a.softcap < 0.0f) c.fail("softcap must be >= 0");
  for (size_t i = 0; i < 3; ++i)
    if (c.shape(i).size() != 3) c.fail("input ", i, " must be [B, L, heads*head_dim], got ", shape_to_string(c.shape(i)));
  const Shape& q = c.shape(0);
  const Shape& k = c.shape(1);
  c.expect_dim(q[2], Dim(int64_t{a.num_heads} * a.head_dim), "Q width");
  c.expect_dim(k[2], Dim(int64_t{a.num_kv_heads} * a.head_dim), "K width");
  if (!(c.shape(2) == k)) c.fail("V shape ", shape_to_string(c.shape(2)), " must equal K shape ", shape_to_string(k));
  c.expect_dim(k[0], q[0], "K batch");
  if (a.mask == MaskKind::Custom) {
    const Shape& m = c.shape(3);
    if (m.size() != 2) c.fail("key mask must be [B, Lk], got ", shape_to_string(m));
    c.expect_dim(m[0], q[0], "key mask batch");
    c.expect_dim(m[1], k[1], "key mask length");
  }
  if (a.mask == MaskKind::Bias) {
    c.float_input(3);
    const Shape& b = c.shape(3);
    if (b.size() != 4) c.fail("bias must be [B|1, H|1, Lq, Lk], got ", shape_to_string(b));
    if (!(b[0] == Dim(1))) c.expect_dim(b[0], q[0], "bias batch");
    if (!(b[1] == Dim(1))) c.expect_dim(b[1], Dim(a.num_heads), "bias heads");
    c.expect_dim(b[2], q[1], "bias Lq");
    c.expect_dim(b[3], k[1], "bias Lk");
  }
  if (a.kv_len_input) {
    const size_t i = arity - 1;
    if (c.dtype(i) != DType::I32) c.fail("kv_len must be i32, got ", c.dtype(i));
    const Shape& l = c.shape(i);
    if (l.size() != 1 || !(l[0] == Dim(1) || l[0] == q[0]))
      c.fail("kv_len must be [1] or [B], got ", shape_to_string(l));
  }
  return c.type(0);
}

TensorType infer_rope(const Ctx& c, const RopeAttrs& a) {
  c.arity(a.head_norm ? 3 : 2, a.head_norm ? 3 : 2);
  c.float_input(0);
  const Shape& x = c.shape(0);
  if (x.size() != 3) c.fail("x must be [B, L, W], got ", shape_to_string(x));
  if (a.head_dim < 2 || a.n_rot < 2 || a.n_rot > a.head_dim || a.n_rot % 2 != 0)
    c.fail("n_rot ", a.n_rot, " must be even and in [2, head_dim=", a.head_dim, "]");
  if (a.num_heads < 1 || a.src_offset < 0) c.fail("bad num_heads/src_offset");
  if (!a.freq_factors.empty()) {
    if (a.freq_factors.size() != static_cast<size_t>(a.n_rot / 2))
      c.fail(a.freq_factors.size(), " frequency factors for n_rot ", a.n_rot, " (need n_rot/2 = ", a.n_rot / 2, ")");
    for (size_t i = 0; i < a.freq_factors.size(); ++i)
      if (!(std::isfinite(a.freq_factors[i]) && a.freq_factors[i] > 0.0f))
        c.fail("frequency factor ", i, " is ", a.freq_factors[i], " (must be finite and positive)");
  }
  const int64_t need = a.src_offset + int64_t{a.num_heads} * a.head_dim;
  if (x[2].is_static() && need > x[2].value) c.fail("heads end at column ", need, " but rows have ", x[2].value);
  if (!x[2].is_static() && (a.src_offset != 0)) c.fail("strided rope needs a static row width");
  if (c.dtype(1) != DType::I32) c.fail("positions must be i32, got ", c.dtype(1));
  const Shape& p = c.shape(1);
  if (p.size() == 1) c.expect_dim(p[0], x[1], "positions length");
  else if (p.size() == 2) {
    c.expect_dim(p[0], x[0], "positions batch");
    c.expect_dim(p[1], x[1], "positions length");
  } else c.fail("positions must be [L] or [B, L]");
  if (a.head_norm) {
    c.float_input(2);
    if (c.shape(2).size() != 1) c.fail("head norm weight must be 1-D, got ", shape_to_string(c.shape(2)));
    c.expect_dim(c.shape(2)[0], Dim(a.head_dim), "head norm weight length");
    if (!(a.norm_eps >= 0.0f)) c.fail("norm_eps must be >= 0, got ", a.norm_eps);
  }
  return {c.dtype(0), {x[0], x[1], Dim(int64_t{a.num_heads} * a.head_dim)}};
}

// WriteSlice with rope: the rotated update must fill rows of the state.
TensorType infer_rope_write(const Ctx& c, const WriteSliceAttrs& w) {
  const RopeAttrs& a = w.rope_attrs;
  c.arity(a.head_norm ? 5 : 4, a.head_norm ? 5 : 4);
  if (c.g.node(c.in[0]).op != OpKind::State && c.g.node(c.in[0]).op != OpKind::WriteSlice)
    c.fail("first input must be a State (or a WriteSlice of one)");
  if (!is_compute_float(c.dtype(0)) || !is_compute_float(c.dtype(1)))
    c.fail("rope write needs f32/f16/bf16 state and update, got ", c.dtype(0), " and ", c.dtype(1));
  if (w.axis != 1) c.fail("rope write goes along axis 1, got axis ", w.axis);
  if (c.dtype(2) != DType::I32) c.fail("offset must be i32, got ", c.dtype(2));
  // The rotated rows as a Rope over (update, positions [, weight]) would give them.
  std::vector<NodeId> rope_in{c.in[1], c.in[3]};
  if (a.head_norm) rope_in.push_back(c.in[4]);
  const Ctx rc{c.g, rope_in, c.where};
  const TensorType rows = infer_rope(rc, a);
  const Shape& s = c.shape(0);
  if (s.size() != 3) c.fail("state must be [B, ctx, H·D], got ", shape_to_string(s));
  c.expect_dim(rows.shape[0], s[0], "update batch");
  c.expect_dim(rows.shape[2], s[2], "rotated row width");
  const Dim& l = rows.shape[1];
  if (l.is_static() && s[1].is_static() && l.value > s[1].value) c.fail("update is longer than the state along axis 1");
  return c.type(0);
}

}  // namespace

TensorType infer_type(const Graph& g, OpKind op, const Attrs& attrs, const std::vector<NodeId>& inputs,
                      const std::string& where) {
  Ctx c{g, inputs, where};
  auto need_attrs = [&](bool ok) {
    if (!ok) c.fail("attribute struct ", attrs.index(), " does not belong to this op");
  };
  switch (op) {
    case OpKind::Input: case OpKind::Param: case OpKind::Constant: case OpKind::State:
      c.fail("leaves are added with add_input/add_param/add_state/add_constant");
    case OpKind::Unary: need_attrs(std::holds_alternative<UnaryAttrs>(attrs)); return infer_elementwise(c, op, attrs);
    case OpKind::Binary: need_attrs(std::holds_alternative<BinaryAttrs>(attrs)); return infer_elementwise(c, op, attrs);
    case OpKind::Compare: need_attrs(std::holds_alternative<CompareAttrs>(attrs)); return infer_elementwise(c, op, attrs);
    case OpKind::Where: return infer_elementwise(c, op, attrs);
    case OpKind::Cast: need_attrs(std::holds_alternative<CastAttrs>(attrs)); return infer_elementwise(c, op, attrs);
    case OpKind::MatMul: {
      need_attrs(std::holds_alternative<MatMulAttrs>(attrs));
      c.arity(2, 2);
      const auto& a = std::get<MatMulAttrs>(attrs);
      return infer_matmul(c, a.transpose_a, a.transpose_b);
    }
    case OpKind::FusedMatMulBiasAct: {
      need_attrs(std::holds_alternative<FusedMatMulBiasActAttrs>(attrs));
      c.arity(3, 3);
      TensorType t = infer_matmul(c, false, std::get<FusedMatMulBiasActAttrs>(attrs).transpose_b);
      c.float_input(2);
      if (c.shape(2).size() != 1) c.fail("bias must be 1-D, got ", shape_to_string(c.shape(2)));
      c.expect_dim(c.shape(2)[0], t.shape.back(), "bias length");
      return t;
    }
    case OpKind::DequantMatMul: {
      c.arity(2, 2);
      c.float_input(0);
      const Shape& x = c.shape(0);
      const Shape& w = c.shape(1);
      DType wt = c.dtype(1);
      if (!is_quant(wt) && wt != DType::F8E4M3 && wt != DType::F8E5M2 && !is_float(wt))
        c.fail("weights must be a quant, fp8 or float type, got ", wt);
      if (x.empty() || w.size() != 2) c.fail("x must be [..., K] and W [N, K], got ", shape_to_string(x), " and ", shape_to_string(w));
      c.expect_dim(w[1], x.back(), "W's K");
      if (w[1].is_static() && w[1].value % dtype_info(wt).block_elems != 0)
        c.fail("K=", w[1].value, " is not a multiple of ", wt, "'s block of ", dtype_info(wt).block_elems);
      Shape out = x;
      out.back() = w[0];
      return {c.dtype(0), out};
    }
    case OpKind::ScaledMatMul: {
      need_attrs(std::holds_alternative<ScaledMatMulAttrs>(attrs));
      c.arity(4, 5);
      const DType out = std::get<ScaledMatMulAttrs>(attrs).out;
      if (out != DType::F32 && out != DType::F16 && out != DType::BF16)
        c.fail("the result dtype must be f32, f16 or bf16, got ", out);
      for (size_t i : {size_t{0}, size_t{1}})
        if (c.dtype(i) != DType::F8E4M3 && c.dtype(i) != DType::F8E5M2)
          c.fail("input ", i, " must be f8e4m3 or f8e5m2, got ", c.dtype(i));
      const Shape& a = c.shape(0);
      const Shape& b = c.shape(1);
      if (a.empty() || b.size() != 2)
        c.fail("a must be [..., K] and b [N, K], got ", shape_to_string(a), " and ", shape_to_string(b));
      c.expect_dim(b[1], a.back(), "b's K");
      // A scale is one value (any shape of one element) or one per row.
      auto scale = [&](size_t i, Shape rows, const char* what) {
        if (c.dtype(i) != DType::F32) c.fail(what, " must be f32, got ", c.dtype(i));
        const Shape& s = c.shape(i);
        const bool one = std::all_of(s.begin(), s.end(), [](const Dim& d) { return d == Dim(1); });
        rows.back() = Dim(1);
        if (!one && s != rows)
          c.fail(what, " must hold one value or be ", shape_to_string(rows), ", got ", shape_to_string(s));
      };
      scale(2, a, "scale_a");
      scale(3, b, "scale_b");
      Shape y = a;
      y.back() = b[0];
      if (c.in.size() == 5) {
        if (c.dtype(4) != out) c.fail("bias must have the result dtype ", out, ", got ", c.dtype(4));
        if (c.shape(4).size() != 1) c.fail("bias must be 1-D, got ", shape_to_string(c.shape(4)));
        c.expect_dim(c.shape(4)[0], b[0], "bias length");
      }
      return {out, y};
    }
    case OpKind::LayerNorm: case OpKind::RmsNorm: case OpKind::FusedResidualLayerNorm: case OpKind::FusedResidualRmsNorm:
      need_attrs(std::holds_alternative<NormAttrs>(attrs));
      return infer_norm(c, op);
    case OpKind::FusedPostRmsNorm:
      need_attrs(std::holds_alternative<NormAttrs>(attrs));
      return infer_post_rms_norm(c);
    case OpKind::Softmax: case OpKind::Reduce: case OpKind::ArgMax: case OpKind::TopK: case OpKind::Sample:
      return infer_reduce_like(c, op, attrs);
    case OpKind::Gather: case OpKind::Reshape: case OpKind::Transpose: case OpKind::Narrow: case OpKind::Concat:
    case OpKind::Expand: case OpKind::WriteSlice:
      return infer_movement(c, op, attrs);
    case OpKind::Bitcast: {
      need_attrs(std::holds_alternative<CastAttrs>(attrs));
      c.arity(1, 1);
      const DType from = c.dtype(0), to = std::get<CastAttrs>(attrs).to;
      if (is_quant(from) || is_quant(to)) c.fail("bitcast needs scalar types, got ", from, " to ", to);
      const int64_t a = dtype_size(from), b = dtype_size(to);
      Shape s = c.shape(0);
      if (a > b) {
        if (a % b != 0) c.fail("cannot bitcast ", from, " (", a, " bytes) to ", to, " (", b, " bytes)");
        s.push_back(Dim(a / b));
      } else if (a < b) {
        if (b % a != 0) c.fail("cannot bitcast ", from, " (", a, " bytes) to ", to, " (", b, " bytes)");
        if (s.empty() || !(s.back() == Dim(b / a)))
          c.fail("bitcast ", from, " to ", to, " needs a last dim of ", b / a, ", got ", shape_to_string(s));
        s.pop_back();
      }
      return {to, s};
    }
    case OpKind::Attention:
      need_attrs(std::holds_alternative<AttentionAttrs>(attrs));
      return infer_attention(c, std::get<AttentionAttrs>(attrs));
    case OpKind::Rope:
      need_attrs(std::holds_alternative<RopeAttrs>(attrs));
      return infer_rope(c, std::get<RopeAttrs>(attrs));
    case OpKind::FusedSwiGLU: case OpKind::FusedGeGLU: {
      c.arity(1, 1);
      c.float_input(0);
      Shape s = c.shape(0);
      if (s.empty() || !s.back().is_static() || s.back().value % 2 != 0)
        c.fail("last dim must be static and even, got ", shape_to_string(s));
      s.back() = Dim(s.back().value / 2);
      return {c.dtype(0), s};
    }
    case OpKind::Fft: {
      need_attrs(std::holds_alternative<FftAttrs>(attrs));
      c.arity(1, 1);
      const auto& a = std::get<FftAttrs>(attrs);
      Shape s = c.shape(0);
      if (s.empty()) c.fail("fft needs rank >= 1");
      if (a.real_input && a.real_output) c.fail("fft cannot have both a real input and a real output");
      if (a.real_input && a.inverse) c.fail("a real-input fft is forward only (use real_output for the inverse)");
      if (a.real_output && !a.inverse) c.fail("a real-output fft is inverse only (use real_input for the forward)");
      if (s.back().is_static() && s.back().value < 1) c.fail("fft length must be >= 1, got ", s.back().value);
      if (a.real_input) {
        c.float_input(0);
        if (!s.back().is_static()) c.fail("real fft needs a static length");
        s.back() = Dim(s.back().value / 2 + 1);
        return {DType::C64, s};
      }
      if (c.dtype(0) != DType::C64) c.fail("complex fft input must be c64, got ", c.dtype(0));
      if (a.real_output) {
        if (a.n < 1) c.fail("a real-output fft needs its signal length n >= 1, got ", a.n);
        if (!s.back().is_static() || s.back().value != a.n / 2 + 1)
          c.fail("a real-output fft of n = ", a.n, " takes ", a.n / 2 + 1, " bins, got ", shape_to_string(s));
        s.back() = Dim(a.n);
        return {DType::F32, s};
      }
      return {DType::C64, s};
    }
    case OpKind::GaussianSplatRender: {
      need_attrs(std::holds_alternative<SplatAttrs>(attrs));
      const auto& a = std::get<SplatAttrs>(attrs);
      if (a.width < 1 || a.height < 1 || a.width > 16384 || a.height > 16384)
        c.fail("image size ", a.width, "x", a.height, " must be within 1x1 .. 16384x16384");
      if (!(a.near_plane > 0.0f) || !(a.eps2d >= 0.0f)) c.fail("near_plane must be > 0 and eps2d >= 0");
      c.arity(8, 8);
      static constexpr const char* kNames[] = {"means",  "scales", "rotations",  "opacities",
                                               "colors", "view",   "intrinsics", "background"};
      for (size_t i = 0; i < 8; ++i)
        if (c.dtype(i) != DType::F32) c.fail(kNames[i], " must be f32, got ", c.dtype(i));
      const Dim n = c.shape(0).empty() ? Dim(0) : c.shape(0)[0];
      auto expect = [&](size_t i, Shape want) {
        if (c.shape(i).size() != want.size())
          c.fail(kNames[i], " must be ", shape_to_string(want), ", got ", shape_to_string(c.shape(i)));
        for (size_t d = 0; d < want.size(); ++d) c.expect_dim(c.shape(i)[d], want[d], kNames[i]);
      };
      expect(0, {n, Dim(3)});
      expect(1, {n, Dim(3)});
      expect(2, {n, Dim(4)});
      expect(3, {n});
      expect(4, {n, Dim(3)});
      expect(5, {Dim(4), Dim(4)});
      expect(6, {Dim(4)});
      expect(7, {Dim(3)});
      return {DType::F32, {Dim(a.height), Dim(a.width), Dim(3)}};
    }
    case OpKind::Custom: {
      need_attrs(std::holds_alternative<CustomAttrs>(attrs));
      const auto& a = std::get<CustomAttrs>(attrs);
      const CustomOpDef& def = find_custom_op(a.name);
      c.arity(static_cast<size_t>(def.min_inputs), static_cast<size_t>(def.max_inputs));
      std::vector<TensorType> ts;
      for (size_t i = 0; i < inputs.size(); ++i) ts.push_back(c.type(i));
      try {
        return def.infer(ts, a);
      } catch (const Error& e) {
        c.fail(e.what());
      }
    }
    case OpKind::Count_: break;
  }
  c.fail("unknown op kind ", static_cast<int>(op));
}

}  // namespace rlx
