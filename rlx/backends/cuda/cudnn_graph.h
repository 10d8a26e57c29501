// The cuDNN graph path (DESIGN §1, the MPSGraph analogue): attention, matmul
// with a pointwise epilogue, and layer/RMS norm expressed as cuDNN 9 backend
// operation graphs, finalized into execution plans once per shape (cached by
// a key of every shape, stride, dtype and attribute) and executed by a thunk.
// This header has no cuDNN types, so it compiles without cuDNN; every plan
// builder then refuses with "built without cuDNN".
//
// A builder returns null and sets *why when cuDNN cannot take the graph (no
// engine, finalize failure, a plan that does not survive CUDA-graph capture);
// the caller falls back to its own kernels. Lowering policy (which IR nodes
// are eligible, the RLX_CUDNN_* knobs) lives in lower_cudnn.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda::cudnn {

// True when built with cuDNN and the library loads; else false with the reason.
bool available(std::string* why = nullptr);
// Version of the loaded library ("9.14.0"), or "" when unavailable.
std::string version();

// Scaled-dot-product attention forward, inference. Layouts as in
// kernels/attention.h: Q [B, Lq, H·D] and K/V [B, Lk, Hkv·D] with the given
// row and batch strides (elements; the head stride is D), out [B, Lq, H·D]
// contiguous. Causal is bottom-right aligned and needs Lq ≤ Lk.
struct AttentionSpec {
  DType dtype = DType::F16;  // f16 or bf16
  int B = 1, H = 1, Hkv = 1, Lq = 0, Lk = 0, D = 64;
  int64_t q_row_stride = 0, q_batch_stride = 0;
  int64_t k_row_stride = 0, k_batch_stride = 0;
  int64_t v_row_stride = 0, v_batch_stride = 0;
  float scale = 1.0f;
  bool causal = false;
  void set_dense_strides();
  std::string key() const;
};

// C[b] = act(A[b]·B[b] + bias), A [batch|1, M, K] (transposed when trans_a),
// B [batch|1, K, N] (transposed when trans_b), bias [N] or none, C [batch, M, N]
// contiguous. A batch stride of 0 broadcasts that operand.
struct MatmulSpec {
  DType dtype = DType::F16;  // of A, B and C: f16 or bf16
  int64_t batch = 1, M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;  // leading (row) strides as stored
  int64_t a_batch_stride = 0, b_batch_stride = 0;
  bool has_bias = false;
  DType bias_dtype = DType::F16;
  Activation act = Activation::None;  // None, Relu, GeluErf or GeluTanh
  std::string key() const;
};

// y = norm(x) · gamma (+ beta) over the last axis of x [rows, cols], inference.
struct NormSpec {
  DType dtype = DType::F16;        // of x and y
  DType param_dtype = DType::F16;  // of gamma and beta
  int64_t rows = 0, cols = 0;
  bool layer = true;  // false: RMS norm (no beta)
  float eps = 1e-5f;
  std::string key() const;
};

class Plan;  // a finalized execution plan with its tensor ids (cudnn_graph.cpp)

// Cached per (device, spec). Device pointers are bound later, in this order:
//   attention: q, k, v, out          matmul: a, b, [bias,] c          norm: x, gamma, [beta,] y
std::shared_ptr<const Plan> attention_plan(int device, const AttentionSpec& spec, std::string* why);
std::shared_ptr<const Plan> matmul_plan(int device, const MatmulSpec& spec, std::string* why);
std::shared_ptr<const Plan> norm_plan(int device, const NormSpec& spec, std::string* why);

size_t plan_workspace_bytes(const Plan& plan);
// "cudnn engine 7" (the global engine index heuristics chose), for reports.
std::string plan_engine(const Plan& plan);

// One node's execution: a plan with its device pointers bound. run() is
// asynchronous on `stream`, allocates nothing and may be captured into a CUDA
// graph; `workspace` holds plan_workspace_bytes (may be null when that is 0).
class Execution {
 public:
  Execution(std::shared_ptr<const Plan> plan, std::vector<void*> pointers);
  ~Execution();
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;
  void run(void* workspace, cudaStream_t stream);

 private:
  struct Pack;
  std::shared_ptr<const Plan> plan_;
  std::vector<void*> pointers_;
  std::unique_ptr<Pack> pack_;  // variant pack, rebuilt when the workspace moves
};

// Plans built since start (cache misses that reached finalize), for tests.
int64_t plans_built();

}  // namespace rlx::cuda::cudnn
