// Symbolic shapes. A Dim is a static size or a named symbol ("B", "L");
// the same symbol means the same size everywhere in a graph. Executables are
// specialized per binding of symbols to sizes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/core/dtype.h"

namespace rlx {

struct Dim {
  int64_t value = -1;  // static size; -1 when symbolic
  std::string symbol;  // non-empty when symbolic

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: sizes convert implicitly
  Dim(int v) : value(v) {}      // NOLINT
  Dim(const char* s) : symbol(s) {}  // NOLINT: "B" reads naturally in shape lists
  Dim(std::string s) : symbol(std::move(s)) {}  // NOLINT

  bool is_static() const { return symbol.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string to_string() const { return is_static() ? std::to_string(value) : symbol; }
};

using Shape = std::vector<Dim>;
using SymbolBinding = std::map<std::string, int64_t>;

bool is_static(const Shape& s);
// Element count of a fully static shape (throws naming the symbol otherwise).
int64_t static_numel(const Shape& s);
std::vector<int64_t> static_dims(const Shape& s);
Shape make_shape(const std::vector<int64_t>& dims);
std::string shape_to_string(const Shape& s);
// Substitutes bound symbols; unbound ones stay symbolic.
Shape bind_shape(const Shape& s, const SymbolBinding& b);

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  int rank() const { return static_cast<int>(shape.size()); }
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  std::string to_string() const;
};

}  // namespace rlx
