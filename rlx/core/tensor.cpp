#include "rlx/core/tensor.h"

#include <cstring>
#include <sstream>

#include "rlx/core/half.h"

namespace rlx {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    RLX_SHAPE_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    RLX_SHAPE_CHECK(d == 0 || n <= (int64_t{1} << 62) / d, "shape ", shape_str(shape), " overflows int64");
    n *= d;
  }
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  // 64-byte aligned so SIMD loops and BLAS see aligned rows.
  size_t alloc = (bytes + 63) / 64 * 64;
  void* p = alloc ? std::aligned_alloc(64, alloc) : nullptr;
  RLX_CHECK_AS(OutOfMemory, alloc == 0 || p, "host allocation of ", bytes, " bytes failed");
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes) {
  Tensor t = empty(dtype, std::move(shape));
  RLX_CHECK(nbytes == t.nbytes(), "Tensor::from_bytes: ", nbytes, " bytes given, ", t.nbytes(),
            " needed for ", dtype, " ", shape_str(t.shape_));
  if (nbytes) std::memcpy(t.data_, bytes, nbytes);
  return t;
}

Tensor Tensor::view_external(DType dtype, std::vector<int64_t> shape, const void* data,
                             std::shared_ptr<const void> keep_alive) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  (void)t.nbytes();  // validates the shape against the block size
  t.owner_ = std::move(keep_alive);
  t.data_ = const_cast<void*>(data);
  t.writable_ = false;
  return t;
}

Tensor Tensor::adopt(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner) {
  Tensor t = view_external(dtype, std::move(shape), data, std::move(owner));
  t.writable_ = true;
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = rank();
  RLX_CHECK(i >= -r && i < r, "dim ", i, " out of range for rank ", r);
  return shape_[static_cast<size_t>(i < 0 ? i + r : i)];
}

void* Tensor::raw_mut() {
  RLX_CHECK(writable_, "tensor views read-only external memory; clone() it to write");
  return data_;
}

void Tensor::check_type(DType t) const {
  RLX_CHECK(t == dtype_, "tensor holds ", dtype_, " but was accessed as ", t);
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  RLX_SHAPE_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const { return from_bytes(dtype_, shape_, data_, nbytes()); }

namespace {

double load_f64(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F8E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::F8E5M2: return fp8_e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::I8: return static_cast<const int8_t*>(p)[i];
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::I16: return static_cast<const int16_t*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
    default: throw Unsupported(str("no element conversion from ", t));
  }
}

void store_f64(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::F8E4M3: static_cast<uint8_t*>(p)[i] = f32_to_fp8_e4m3(static_cast<float>(v)); break;
    case DType::F8E5M2: static_cast<uint8_t*>(p)[i] = f32_to_fp8_e5m2(static_cast<float>(v)); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::I16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != 0.0; break;
    default: throw Unsupported(str("no element conversion to ", t));
  }
}

}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  RLX_CHECK(!is_quant(dtype_) && !is_quant(dtype), "Tensor::to: cannot convert ", dtype_, " to ", dtype,
            " (quant types need dequantization)");
  Tensor t = empty(dtype, shape_);
  const int64_t n = numel();
  if (dtype_ == DType::I64 && dtype == DType::I32) {  // exact, no detour through f64
    for (int64_t i = 0; i < n; ++i)
      static_cast<int32_t*>(t.data_)[i] = static_cast<int32_t>(static_cast<const int64_t*>(data_)[i]);
    return t;
  }
  for (int64_t i = 0; i < n; ++i) store_f64(t.data_, dtype, i, load_f64(data_, dtype_, i));
  return t;
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = load_f64(data_, dtype_, i);
  return out;
}

}  // namespace rlx
