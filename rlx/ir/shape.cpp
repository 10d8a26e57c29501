#include "rlx/ir/shape.h"

#include <sstream>

#include "rlx/core/error.h"
#include "rlx/core/tensor.h"

namespace rlx {

bool is_static(const Shape& s) {
  for (const auto& d : s)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> static_dims(const Shape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const auto& d : s) {
    RLX_SHAPE_CHECK(d.is_static(), "shape ", shape_to_string(s), " has unbound symbol '", d.symbol, "'");
    out.push_back(d.value);
  }
  return out;
}

int64_t static_numel(const Shape& s) { return shape_numel(static_dims(s)); }

Shape make_shape(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i].to_string();
  os << "]";
  return os.str();
}

Shape bind_shape(const Shape& s, const SymbolBinding& b) {
  Shape out = s;
  for (auto& d : out) {
    if (d.is_static()) continue;
    auto it = b.find(d.symbol);
    if (it != b.end()) d = Dim(it->second);
  }
  return out;
}

std::string TensorType::to_string() const { return str(dtype_name(dtype), shape_to_string(shape)); }

}  // namespace rlx
