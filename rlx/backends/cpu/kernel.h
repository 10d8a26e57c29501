// The CPU kernel interface. A kernel reads its inputs and writes its output
// through KernelArgs; shapes are static. Float kernels compute in f32: for
// f16/bf16 storage, in_f32()/out_f32() stage through f32 scratch and the
// dispatcher converts the output back after the kernel returns.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "rlx/backends/cpu/thread_pool.h"
#include "rlx/core/error.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/kernel_registry.h"

namespace rlx::cpu {

// An f32 staging buffer of at least `n` floats, not zero-filled, borrowed
// from a process-wide pool and given back when destroyed: f16/bf16 operands
// are staged on every kernel call, and fresh zero-filled vectors cost a bf16
// MiniLM run 5% in memset and page faults.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  explicit StagingBuffer(size_t n);
  ~StagingBuffer();
  StagingBuffer(StagingBuffer&& o) noexcept = default;
  StagingBuffer& operator=(StagingBuffer&& o) noexcept;
  float* data() const { return data_.get(); }
  bool empty() const { return !data_; }
  // Frees the buffers the pool keeps.
  static void trim();

 private:
  std::unique_ptr<float[]> data_;
  size_t bytes_ = 0;
};

// What kernels derive from a param's value (a weight packed for a GEMM
// kernel), kept with the param's buffer, shared by every program of its
// Executable, and dropped whenever the param is written.
class ParamCache {
 public:
  // The entry under `key`, made by make() on first use.
  std::shared_ptr<const void> get(const std::string& key, const std::function<std::shared_ptr<const void>()>& make);
  void clear();

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const void>> entries_;
};

class KernelArgs {
 public:
  KernelArgs(const Graph& g, NodeId id, std::vector<const void*> in, void* out, ThreadPool& pool);

  const Graph& graph;
  const NodeId id;
  const Node& node;
  ThreadPool& pool;

  template <typename A> const A& attrs() const { return node.attr<A>(); }
  size_t num_inputs() const { return in_.size(); }
  DType in_dtype(size_t i) const { return type(i).dtype; }
  DType out_dtype() const { return node.type.dtype; }
  const std::vector<int64_t>& in_dims(size_t i) const { return in_dims_[i]; }
  const std::vector<int64_t>& out_dims() const { return out_dims_; }
  int64_t in_numel(size_t i) const;
  int64_t out_numel() const;

  // Raw storage (any dtype).
  const void* in_raw(size_t i) const { return in_[i]; }
  void* out_raw() const { return out_; }
  template <typename T> const T* in(size_t i) const { return static_cast<const T*>(in_[i]); }
  template <typename T> T* out() const { return static_cast<T*>(out_); }

  // f32 view of a float input (converted copy for f16/bf16/f64).
  const float* in_f32(size_t i);
  // The same for an input laid out [outer, rows, row_elems] of which only
  // rows [0, used[o]) of each outer index o are read (a KV cache up to its
  // valid length): only those rows are converted (and their pages touched);
  // the others are left unset. `used` has `outer` entries, each ≤ rows.
  const float* in_f32_rows(size_t i, int64_t outer, int64_t rows, int64_t row_elems, const int64_t* used);
  // f32 output buffer; for non-f32 outputs finish() converts it into place.
  float* out_f32();
  void finish();

  // For kernels templated on their compute type T: float goes through the
  // f32 staging above (so f16/bf16 storage works), other types read and write directly.
  template <typename T> const T* in_as(size_t i) {
    if constexpr (std::is_same_v<T, float>) return in_f32(i);
    else return in<T>(i);
  }
  template <typename T> T* out_as() {
    if constexpr (std::is_same_v<T, float>) return out_f32();
    else return out<T>();
  }

  // The cache of input i's param buffer; null when input i is not a param.
  ParamCache* param_cache(size_t i) const {
    return param_caches_ && i < param_caches_->size() ? (*param_caches_)[i] : nullptr;
  }
  // Set by the program: one entry per input (null where it is not a param).
  void set_param_caches(const std::vector<ParamCache*>* caches) { param_caches_ = caches; }

  // "node %3 (Softmax 'x')" for error messages.
  std::string where() const { return graph.describe(id); }

 private:
  const TensorType& type(size_t i) const { return graph.node(node.inputs[i]).type; }
  std::vector<const void*> in_;
  void* out_;
  std::vector<std::vector<int64_t>> in_dims_;
  std::vector<int64_t> out_dims_;
  std::vector<StagingBuffer> in_scratch_;   // in_f32
  std::vector<StagingBuffer> in_partial_;   // in_f32_rows
  StagingBuffer out_scratch_;
  bool out_staged_ = false;
  const std::vector<ParamCache*>* param_caches_ = nullptr;
};

using CpuKernel = std::function<void(KernelArgs&)>;

// Gather/lookup indices: throws InvalidArgument naming the first one outside
// [0, rows) before any row is read.
template <typename I>
void check_row_indices(const KernelArgs& a, const I* idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      throw InvalidArgument(str(a.where(), ": index ", static_cast<int64_t>(idx[i]), " at position ", i,
                                " is out of range for a table of ", rows, " rows"));
}

inline constexpr const char* kCpuBackend = "cpu";

// Registers a kernel for an exact dtype signature (inputs..., output).
void register_cpu_kernel(OpKind op, std::vector<DType> signature, CpuKernel fn, std::string description,
                         bool variadic = false, std::string custom_name = {});
// Registers `fn` three times, with every F32 in `signature` replaced by f32,
// f16 and bf16 in turn (storage types; `fn` computes in f32 via in_f32/out_f32).
void register_cpu_float_kernel(OpKind op, std::vector<DType> signature, const CpuKernel& fn,
                               const std::string& description, bool variadic = false);

// Each kernel family registers itself (kernels/*.cpp).
void register_elementwise_kernels();
void register_matmul_kernels();
void register_norm_kernels();
void register_reduce_kernels();
void register_select_kernels();
void register_movement_kernels();
void register_attention_kernels();
void register_quant_kernels();  // DequantMatMul, Gather from quant tables
void register_fft_kernels();
void register_splat_kernels();  // GaussianSplatRender
void register_all_kernels();  // idempotent

// Shared numerics (kernels/vmath.h has the inline versions for loops,
// gelu_tanh_fast among them).
float gelu_erf(float x);

}  // namespace rlx::cpu
