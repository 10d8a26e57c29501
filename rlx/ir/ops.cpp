#include "rlx/ir/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace rlx {

const char* op_name(OpKind op) {
  static constexpr const char* kNames[] = {
      "Input", "Param", "Constant", "State", "Unary", "Binary", "Compare", "Where", "Cast", "MatMul",
      "FusedMatMulBiasAct", "DequantMatMul", "ScaledMatMul", "LayerNorm", "RmsNorm", "FusedResidualLayerNorm",
      "FusedResidualRmsNorm", "FusedPostRmsNorm", "Softmax", "Reduce", "ArgMax", "TopK", "Sample", "Gather", "Reshape",
      "Transpose", "Narrow", "Concat", "Expand", "WriteSlice", "Bitcast", "Attention", "Rope", "FusedSwiGLU",
      "FusedGeGLU", "Fft", "GaussianSplatRender", "Custom"};
  static_assert(std::size(kNames) == static_cast<size_t>(OpKind::Count_));
  auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* unary_name(UnaryFn f) {
  static constexpr const char* k[] = {"gelu_erf", "gelu_tanh", "silu", "relu", "sigmoid", "tanh", "exp",
                                      "log", "sqrt", "rsqrt", "neg", "abs", "sin", "cos"};
  return k[static_cast<size_t>(f)];
}
const char* binary_name(BinaryFn f) {
  static constexpr const char* k[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
  return k[static_cast<size_t>(f)];
}
const char* compare_name(CompareFn f) {
  static constexpr const char* k[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return k[static_cast<size_t>(f)];
}
const char* fft_norm_name(FftNorm n) {
  static constexpr const char* k[] = {"backward", "ortho", "forward"};
  return k[static_cast<size_t>(n)];
}
const char* reduce_name(ReduceFn f) {
  static constexpr const char* k[] = {"sum", "mean", "max", "min"};
  return k[static_cast<size_t>(f)];
}
UnaryFn activation_unary(Activation a) {
  switch (a) {
    case Activation::GeluErf: return UnaryFn::GeluErf;
    case Activation::GeluTanh: return UnaryFn::GeluTanh;
    case Activation::Relu: return UnaryFn::Relu;
    case Activation::Silu: return UnaryFn::Silu;
    case Activation::None: break;
  }
  throw Error("activation_unary: Activation::None applies no function");
}

const char* activation_name(Activation a) {
  static constexpr const char* k[] = {"none", "gelu_erf", "gelu_tanh", "relu", "silu"};
  return k[static_cast<size_t>(a)];
}
const char* mask_name(MaskKind m) {
  static constexpr const char* k[] = {"none", "causal", "sliding_window", "custom", "bias"};
  return k[static_cast<size_t>(m)];
}
const char* rope_pairing_name(RopePairing p) { return p == RopePairing::NeoX ? "neox" : "interleaved"; }

bool ConstantAttrs::operator==(const ConstantAttrs& o) const {
  return value.dtype() == o.value.dtype() && value.shape() == o.value.shape() &&
         std::memcmp(value.raw(), o.value.raw(), value.nbytes()) == 0;
}

std::vector<double> rope_inv_freq(const RopeAttrs& a) {
  const int half = a.n_rot / 2;
  RLX_CHECK(a.freq_factors.empty() || a.freq_factors.size() == static_cast<size_t>(half), "rope: ",
            a.freq_factors.size(), " frequency factors for ", half, " rotated pairs");
  std::vector<double> f(static_cast<size_t>(std::max(half, 0)));
  for (int i = 0; i < half; ++i) {
    f[static_cast<size_t>(i)] = std::pow(static_cast<double>(a.freq_base), -2.0 * i / static_cast<double>(a.n_rot));
    if (!a.freq_factors.empty()) f[static_cast<size_t>(i)] /= static_cast<double>(a.freq_factors[static_cast<size_t>(i)]);
  }
  return f;
}

float AttentionAttrs::effective_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

namespace {

template <typename T>
std::string join(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

struct AttrPrinter {
  std::ostringstream& os;
  void operator()(const NoAttrs&) {}
  void operator()(const LeafAttrs& a) { os << "name=" << a.name; }
  void operator()(const ConstantAttrs& a) { os << "value=" << a.value.dtype() << shape_str(a.value.shape()); }
  void operator()(const UnaryAttrs& a) { os << unary_name(a.fn); }
  void operator()(const BinaryAttrs& a) { os << binary_name(a.fn); }
  void operator()(const CompareAttrs& a) { os << compare_name(a.fn); }
  void operator()(const CastAttrs& a) { os << "to=" << a.to; }
  void operator()(const MatMulAttrs& a) { os << "ta=" << a.transpose_a << " tb=" << a.transpose_b; }
  void operator()(const FusedMatMulBiasActAttrs& a) {
    os << "tb=" << a.transpose_b << " act=" << activation_name(a.act);
  }
  void operator()(const DequantMatMulAttrs&) {}
  void operator()(const ScaledMatMulAttrs& a) { os << "out=" << a.out; }
  void operator()(const NormAttrs& a) { os << "eps=" << a.eps; }
  void operator()(const AxisAttrs& a) { os << "axis=" << a.axis; }
  void operator()(const ReduceAttrs& a) {
    os << reduce_name(a.fn) << " axes=" << join(a.axes) << " keepdims=" << a.keepdims;
  }
  void operator()(const ArgMaxAttrs& a) { os << "axis=" << a.axis << " keepdims=" << a.keepdims; }
  void operator()(const TopKAttrs& a) { os << "k=" << a.k << " indices=" << a.indices; }
  void operator()(const SampleAttrs& a) {
    os << "temperature=" << a.temperature << " top_k=" << a.top_k << " top_p=" << a.top_p << " seed=" << a.seed;
  }
  void operator()(const ShapeAttrs& a) { os << "shape=" << shape_to_string(a.shape); }
  void operator()(const TransposeAttrs& a) { os << "perm=" << join(a.perm); }
  void operator()(const NarrowAttrs& a) { os << "axis=" << a.axis << " start=" << a.start << " length=" << a.length; }
  void operator()(const WriteSliceAttrs& a) {
    os << "axis=" << a.axis;
    if (a.rope) {
      os << " rope ";
      (*this)(a.rope_attrs);
    }
  }
  void operator()(const AttentionAttrs& a) {
    os << "heads=" << a.num_heads << " kv_heads=" << a.num_kv_heads << " head_dim=" << a.head_dim
       << " scale=" << a.scale << " softcap=" << a.softcap << " mask=" << mask_name(a.mask)
       << " window=" << a.window;
    if (a.kv_len_input) os << " kv_len_input";
  }
  void operator()(const RopeAttrs& a) {
    os << "heads=" << a.num_heads << " head_dim=" << a.head_dim << " n_rot=" << a.n_rot << " "
       << rope_pairing_name(a.pairing) << " base=" << a.freq_base << " scale=" << a.freq_scale
       << " src_offset=" << a.src_offset;
    if (a.head_norm) os << " head_norm eps=" << a.norm_eps;
    if (!a.freq_factors.empty()) {
      // Their count and an FNV-1a of their bytes: the graph hash reads this text.
      uint64_t h = 1469598103934665603ull;
      for (float f : a.freq_factors) {
        unsigned char b[sizeof f];
        std::memcpy(b, &f, sizeof f);
        for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
      }
      os << " freq_factors=" << a.freq_factors.size() << ":" << std::hex << h << std::dec;
    }
  }
  void operator()(const GluAttrs& a) { os << "tanh=" << a.tanh_approx; }
  void operator()(const FftAttrs& a) {
    os << (a.inverse ? "inverse" : "forward") << " real_input=" << a.real_input << " real_output=" << a.real_output
       << " n=" << a.n << " norm=" << fft_norm_name(a.norm);
  }
  void operator()(const SplatAttrs& a) {
    os << "size=" << a.width << "x" << a.height << " near=" << a.near_plane << " eps2d=" << a.eps2d;
  }
  void operator()(const CustomAttrs& a) {
    os << "name=" << a.name;
    for (const auto& [k, v] : a.values) {
      os << " " << k << "=";
      std::visit([&](const auto& x) { os << x; }, v);
    }
  }
};

}  // namespace

std::string attrs_to_string(const Attrs& a) {
  std::ostringstream os;
  os.precision(9);
  std::visit(AttrPrinter{os}, a);
  return os.str();
}

}  // namespace rlx
