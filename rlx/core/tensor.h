// Tensor: a host array with a dtype and a concrete shape — the typed data that
// crosses the runtime boundary (inputs, outputs, params). Storage is shared
// (copies are shallow); `clone()` deep-copies. A Tensor may also view memory it
// does not own (e.g. an mmapped weight file) while holding a keep-alive handle.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

namespace rlx {

int64_t shape_numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized storage for `shape` elements of `dtype`.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Copies `values` (size must equal the shape's element count).
  template <typename T>
  static Tensor from(std::span<const T> values, std::vector<int64_t> shape) {
    Tensor t = empty(dtype_of_v<T>, std::move(shape));
    RLX_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "Tensor::from: ", values.size(),
              " values for shape ", shape_str(t.shape()));
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  template <typename T>
  static Tensor from(const std::vector<T>& values, std::vector<int64_t> shape) {
    return from(std::span<const T>(values), std::move(shape));
  }
  // Raw bytes of any dtype (quant blocks included), copied.
  static Tensor from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes);
  // Views external memory; `keep_alive` owns it.
  static Tensor view_external(DType dtype, std::vector<int64_t> shape, const void* data,
                              std::shared_ptr<const void> keep_alive);
  // Adopts writable memory that `owner` keeps alive (and that nothing else
  // writes while the tensor lives), e.g. a backend's pinned output block.
  static Tensor adopt(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(dtype_bytes(dtype_, numel())); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  const void* raw() const { return data_; }
  void* raw_mut();
  template <typename T> T* data() {
    check_type(dtype_of_v<T>);
    return static_cast<T*>(raw_mut());
  }
  template <typename T> const T* data() const {
    check_type(dtype_of_v<T>);
    return static_cast<const T*>(data_);
  }
  template <typename T> std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }

  // Same bytes, new shape (element count must match).
  Tensor reshaped(std::vector<int64_t> shape) const;
  Tensor clone() const;
  // Converts between any two non-quant dtypes (floats via f32/f64, ints via int64).
  Tensor to(DType dtype) const;
  // Float values as f64 (any float or int dtype; quant types throw).
  std::vector<double> to_f64() const;

 private:
  void check_type(DType t) const;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  bool writable_ = true;
};

}  // namespace rlx
