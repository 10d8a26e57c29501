// Op → Thunk lowering for the CUDA backend. Each op family registers a
// CudaLowering per dtype signature in the KernelRegistry (backend "cuda");
// at compile time the program calls it once per node to append thunks.
// Lowerings resolve every pointer up front and ask for workspace through
// the context; thunks only launch.
#pragma once
#include <algorithm>
#include <any>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/encoder.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/kernel_registry.h"
#include "rlx/runtime/options.h"

namespace rlx::cuda {

inline constexpr const char* kCudaBackend = "cuda";

// Whether node `id` is one of the graph's outputs.
inline bool is_graph_output(const Graph& g, NodeId id) {
  for (const auto& [_, o] : g.outputs())
    if (o == id) return true;
  return false;
}

class LowerCtx {
 public:
  const Graph& graph;
  const DeviceProps& props;
  const CompileOptions& options;
  GemmEngine& gemm;

  LowerCtx(const Graph& g, const DeviceProps& p, const CompileOptions& o, GemmEngine& e, std::vector<void*> ptrs,
           ThunkSchedule& sched, void* const* workspace)
      : graph(g), props(p), options(o), gemm(e), ptrs_(std::move(ptrs)), sched_(sched), workspace_(workspace) {}

  const Node& node(NodeId id) const { return graph.node(id); }
  const TensorType& type(NodeId id) const { return graph.node(id).type; }
  std::vector<int64_t> dims(NodeId id) const { return static_dims(type(id).shape); }
  void* ptr(NodeId id) const { return ptrs_[static_cast<size_t>(id)]; }
  void* in_ptr(NodeId id, size_t i) const { return ptr(node(id).inputs[i]); }

  // Reserves scratch for the thunks of the node being lowered. Thunks run in
  // order on one stream, so scratch is reused across nodes but never shared
  // by two ops in flight. Read the pointer inside the thunk via workspace().
  void need_workspace(size_t bytes) { workspace_bytes_ = std::max(workspace_bytes_, bytes); }
  void* workspace() const { return *workspace_; }
  void* const* workspace_slot() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // `persistent`: the same work in the persistent kernel's form (persistent.h),
  // which fuse_persistent_segments may run instead of the launch.
  void add(NodeId id, std::string kernel, std::function<void(cudaStream_t)> launch,
           std::shared_ptr<const std::vector<PersistentOp>> persistent = nullptr) {
    sched_.add(Thunk{id, std::move(kernel), std::move(launch), std::move(persistent)});
  }

  // Thunks appended so far. A lowering that delegates to another (the cuDNN
  // path falling back to the built-in one) appends `note` to the names of
  // what the delegate added, so the dispatch report says why.
  size_t thunk_count() const { return sched_.thunks.size(); }
  void note_thunks(size_t from, const std::string& note) {
    for (size_t i = from; i < sched_.thunks.size(); ++i) sched_.thunks[i].kernel += note;
  }

  // A device int32 that kernels of node `id` set nonzero on bad data (an
  // index out of range, a write past a state); the program checks it after
  // each run and reports the node. Valid once compile finishes; read it
  // inside the thunk through the returned slot.
  int32_t* const* error_flag(NodeId id) {
    flag_nodes_.push_back(id);
    flag_slots_.push_back(std::make_unique<int32_t*>(nullptr));
    return flag_slots_.back().get();
  }
  const std::vector<NodeId>& flag_nodes() const { return flag_nodes_; }
  void bind_flags(int32_t* base) {
    for (size_t i = 0; i < flag_slots_.size(); ++i) *flag_slots_[i] = base + i;
  }
  std::vector<std::unique_ptr<int32_t*>> take_flag_slots() { return std::move(flag_slots_); }

  // `n` device int32s that are zero when the program is compiled and that
  // every kernel using them leaves at zero again (the last CTA of a grid-wide
  // reduction resets what it counted), so runs and CUDA-graph replays need no
  // memset before them. Distinct per call; valid once compile finishes; read
  // the pointer inside the thunk through the returned slot.
  int32_t* const* counters(size_t n) {
    counter_slots_.push_back({std::make_unique<int32_t*>(nullptr), n});
    return counter_slots_.back().slot.get();
  }
  size_t counter_ints() const {
    size_t total = 0;
    for (const auto& c : counter_slots_) total += c.n;
    return total;
  }
  void bind_counters(int32_t* base) {
    for (auto& c : counter_slots_) {
      *c.slot = base;
      base += c.n;
    }
  }
  std::vector<std::unique_ptr<int32_t*>> take_counter_slots() {
    std::vector<std::unique_ptr<int32_t*>> out;
    for (auto& c : counter_slots_) out.push_back(std::move(c.slot));
    counter_slots_.clear();
    return out;
  }

  // Device memory the program owns for its whole life (neither the arena nor
  // the workspace, so no other node reuses it): what one node's thunks
  // compute for later nodes to read, e.g. the lengths of a key mask that
  // every layer's attention shares. Distinct per call, 256-byte aligned;
  // valid once compile finishes; read the pointer inside the thunk through
  // the returned slot.
  void* const* persistent(size_t bytes) {
    persistent_slots_.push_back({std::make_unique<void*>(nullptr), (bytes + 255) / 256 * 256});
    return persistent_slots_.back().slot.get();
  }
  size_t persistent_bytes() const {
    size_t total = 0;
    for (const auto& p : persistent_slots_) total += p.bytes;
    return total;
  }
  void bind_persistent(void* base) {
    char* at = static_cast<char*>(base);
    for (auto& p : persistent_slots_) {
      *p.slot = at;
      at += p.bytes;
    }
  }
  std::vector<std::unique_ptr<void*>> take_persistent_slots() {
    std::vector<std::unique_ptr<void*>> out;
    for (auto& p : persistent_slots_) out.push_back(std::move(p.slot));
    persistent_slots_.clear();
    return out;
  }

  // What lowerings of one program share across its nodes, by key (the
  // attention lowering records there which key masks are already prepared).
  std::map<std::string, std::any>& shared() { return shared_; }

  // A lowering that emits the work of later nodes too (a fusion found at
  // lowering time) marks them absorbed; the program then skips them. Its
  // thunk may have to wait until the schedule reaches the last node it
  // covers: add_at(at, ...) appends it right after node `at` is lowered.
  void absorb(NodeId id) { absorbed_.push_back(id); }
  bool absorbed(NodeId id) const { return std::find(absorbed_.begin(), absorbed_.end(), id) != absorbed_.end(); }
  // A GEMM that adds the residual of the residual norm `norm` itself
  // (try_fold_gemm_residual) marks it: the norm then normalizes its input
  // `x_input` (the GEMM's output, which holds the sum) alone.
  void fold_residual(NodeId norm, size_t x_input) { folded_residuals_[norm] = x_input; }
  std::optional<size_t> folded_residual(NodeId norm) const {
    const auto it = folded_residuals_.find(norm);
    return it == folded_residuals_.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
  void add_at(NodeId at, NodeId id, std::string kernel, std::function<void(cudaStream_t)> launch,
              std::shared_ptr<const std::vector<PersistentOp>> persistent = nullptr) {
    deferred_.push_back({at, Thunk{id, std::move(kernel), std::move(launch), std::move(persistent)}});
  }
  bool deferred_empty() const { return deferred_.empty(); }
  void flush_at(NodeId at) {
    for (auto it = deferred_.begin(); it != deferred_.end();)
      if (it->first == at) {
        sched_.add(std::move(it->second));
        it = deferred_.erase(it);
      } else {
        ++it;
      }
  }

  // Users of a node (computed once per program).
  const std::vector<NodeId>& users(NodeId id) {
    if (users_.empty()) users_ = graph.users();
    return users_[static_cast<size_t>(id)];
  }
  const std::vector<std::vector<NodeId>>& all_users() {
    if (users_.empty()) users_ = graph.users();
    return users_;
  }
  bool is_output(NodeId id) const { return is_graph_output(graph, id); }

 private:
  std::vector<void*> ptrs_;
  ThunkSchedule& sched_;
  void* const* workspace_;
  size_t workspace_bytes_ = 0;
  std::vector<NodeId> flag_nodes_;
  std::vector<std::unique_ptr<int32_t*>> flag_slots_;
  struct CounterSlot {
    std::unique_ptr<int32_t*> slot;
    size_t n;
  };
  std::vector<CounterSlot> counter_slots_;
  struct PersistentSlot {
    std::unique_ptr<void*> slot;
    size_t bytes;
  };
  std::vector<PersistentSlot> persistent_slots_;
  std::map<std::string, std::any> shared_;
  std::vector<NodeId> absorbed_;
  std::map<NodeId, size_t> folded_residuals_;
  std::vector<std::pair<NodeId, Thunk>> deferred_;
  std::vector<std::vector<NodeId>> users_;
};

using CudaLowering = std::function<void(LowerCtx&, NodeId)>;

// An op's axis attribute (negative counts from the end) as an index.
inline int norm_axis(int a, size_t rank) { return a < 0 ? a + static_cast<int>(rank) : a; }

// Whether s is (a view of) a program input: the run's one input copy fills
// it before any kernel starts, so a kernel may read it before pdl_wait.
bool is_program_input(LowerCtx& c, NodeId s);

// Whether the bytes of nodes a and b may overlap: each taken as its own block
// and, through Narrows, Reshapes and other views, as the block it reads (a
// Narrow may be a copy or, for some readers, a view). A launch that writes a
// later node's block while it still reads b (a folded Cast) asks this first.
bool blocks_overlap(LowerCtx& c, NodeId a, NodeId b);

// Narrows that attention reads in place (lower_attention.cpp); the program
// passes this to the memory planner so they become views of their source.
bool narrow_folds_into_attention(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id);

// A FusedMatMulBiasAct without activation and the FusedResidualLayerNorm that
// is its only reader, as one sm90 kernel (lower_gemm_ln.cpp): whether the
// norm `ln` takes that form on `device` (the memory plan then makes it a view
// of the projection's block; it needs at least a wave of the kernel's 128-row
// CTAs, RLX_CUDA_GEMM_LN_MIN_ROWS), and the lowering of the projection that
// emits both (false: lower it as usual). gemm_ln_pattern is the graph part
// alone (dtypes, shapes, K ≤ 2048, and with `at_projection` that what the
// norm reads exists by the projection's place), without the device, the row
// count and the knobs.
bool gemm_ln_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId ln,
                     bool at_projection = true);
bool gemm_ln_fuses(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId ln, int device);
bool try_lower_gemm_layer_norm(LowerCtx& c, NodeId id);

// A GEMM (MatMul, or FusedMatMulBiasAct without activation) whose only reader
// is a FusedResidualLayerNorm / FusedResidualRmsNorm of its output P and
// another term R (lower_matmul.cpp): cuBLASLt adds R in its epilogue (its C
// input with beta = 1, rounding once), and the norm then reads P alone,
// where it read P and R (a third less of the norm's traffic; measured at
// parity on BERT-base, N = 768, so off by default). residual_norm_pattern is the graph
// part (the norm, or -1): dtypes and shapes equal, R computed before P or a
// constant or input. try_fold_gemm_residual applies it at P's lowering
// (RLX_CUDA_GEMM_RESIDUAL) and returns the residual to pass to the GEMM, or
// null.
NodeId residual_norm_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p);
const void* try_fold_gemm_residual(LowerCtx& c, NodeId p);

// An encoder's attention over Q, K and V that are Narrows of one bias-only
// FusedMatMulBiasAct, as one sm90 kernel (lower_attention.cpp,
// kernels/qkv_attention_sm90.h; sequences of at most 128 tokens): the
// attention node fused with projection `p` on `device`, or -1; the nodes
// the kernel, which runs at the attention's place, reads besides the
// attention's inputs (the projection's; the memory plan keeps them live
// until then; empty where no such kernel runs); and the lowering of the
// projection that schedules it (false: lower the projection as usual).
// qkv_attention_pattern is the graph part alone, without the device and the
// knob.
NodeId qkv_attention_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p);
NodeId qkv_attention_of(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p, int device);
// The casts RLX_CUDA_FUSE_ATTN_CASTS may fold into the launch before them (a
// decode attention's output to f32; Q, rotated, to the cache dtype): for such
// a Cast, what that earlier launch reads (the attention's inputs; the rope's
// and both cache writes' inputs), which the memory plan keeps live until the
// Cast so that its block, written early, is apart from all of them.
std::vector<NodeId> attention_cast_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id);
std::vector<NodeId> qkv_attention_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id,
                                        int device);
bool try_lower_qkv_attention(LowerCtx& c, NodeId p);

// A post-LN encoder layer's FFN (up projection with GELU-erf, down
// projection, residual LayerNorm) as one sm90 kernel (lower_ffn_ln.cpp,
// kernels/ffn_ln_sm90.h): the norm the up projection `h` is fused with on
// `device`, or -1 (at least RLX_CUDA_FFN_LN_MIN_ROWS rows); the nodes the
// kernel, which runs at the norm's place, reads besides the norm's inputs
// (the up projection's; empty where no such kernel runs); and the lowering
// of the up projection that schedules it (false: lower it as usual).
// ffn_ln_pattern is the graph part alone, without the device and the knobs.
NodeId ffn_ln_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId h);
NodeId ffn_ln_of(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId h, int device);
std::vector<NodeId> ffn_ln_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id,
                                 int device);
bool try_lower_ffn_ln(LowerCtx& c, NodeId h);

// An encoder's pooling tail (mask cast, M = 1 batched MatMul, RmsNorm, cast
// to the output dtype) as one kernel (lower_pool_norm.cpp): the nodes whose
// storage the kernel at node `id` reads besides its inputs (the memory plan
// keeps them live until it; empty when no such kernel runs there), and the
// step before the per-node lowering that absorbs every such pattern.
std::vector<NodeId> pool_norm_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id);
void lower_pool_norms(LowerCtx& c);

// quantize_fp8's per-row chain (Abs, Reduce max, Max, Div, Div, Mul, Cast) as one
// kernel at the Cast's place (lower_fp8_quant.cpp, RLX_CUDA_FUSE_FP8_QUANT):
// the chain's source, which that kernel reads there (empty where none runs),
// and the step before the per-node lowering that absorbs every such chain.
std::vector<NodeId> fp8_quant_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id);
void lower_fp8_quants(LowerCtx& c);

// A quantized embedding Gather with the Cast and scalar Mul after it folded
// into its launch (lower_quant.cpp), which runs at the last folded node: the
// indices, which that launch reads there (empty where no such launch runs).
std::vector<NodeId> gather_scale_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id);

void register_cuda_lowering(OpKind op, std::vector<DType> signature, CudaLowering fn, std::string description,
                            bool variadic = false, std::string custom_name = {});
// Registers for f32, f16 and bf16 (every F32 in the signature replaced).
void register_cuda_float_lowering(OpKind op, std::vector<DType> signature, const CudaLowering& fn,
                                  const std::string& description, bool variadic = false);

// Families (lower_*.cpp).
void register_matmul_lowerings();
void register_elementwise_lowerings();
void register_norm_lowerings();
void register_reduce_lowerings();
void register_movement_lowerings();
void register_attention_lowerings();
void register_transformer_lowerings();  // rope, glu
void register_select_lowerings();
void register_quant_lowerings();  // DequantMatMul, Gather of quantized rows (lower_quant.cpp)
void register_fft_lowerings();    // Fft through cuFFT (lower_fft.cpp)
void register_splat_lowerings();  // GaussianSplatRender (lower_splat.cpp)
// cuDNN graph path (lower_cudnn.cpp): wraps the attention, matmul and norm
// lowerings registered before it; runs last.
void register_cudnn_lowerings();
void register_all_lowerings();  // idempotent

}  // namespace rlx::cuda
