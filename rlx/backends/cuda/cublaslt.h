// cuBLASLt GEMM (the MPS BLAS analogue): row-major C = act(op(A)·op(B) + bias)
// with optional strided batches. Descriptors, layouts and the chosen
// algorithm are cached per problem (shape, strides, dtype, epilogue,
// alignment); plan() does the host-side work so that run() — which may be
// captured into a CUDA graph — only launches.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

struct GemmArgs {
  DType dtype = DType::F32;  // A, B, C and bias storage
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;  // row-major leading dimension; batch stride in elements (0 = broadcast)
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  const void* bias = nullptr;  // [N] or null
  Activation act = Activation::None;  // None, Relu or GeluTanh (cuBLASLt's GELU is the tanh form)
  bool allow_tf32 = false;
};

// Whether cuBLASLt can apply `act` in its epilogue (GELU-erf and SiLU cannot).
bool cublaslt_epilogue_supports(Activation act);

class GemmEngine {
 public:
  explicit GemmEngine(int device);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  // Host-side: builds (or finds) descriptors and the algorithm. Throws
  // DeviceError naming the problem when cuBLASLt has no algorithm for it.
  void plan(const GemmArgs& a);
  // Launches on `stream`; plan(a) must have been called for the same problem.
  void run(const GemmArgs& a, cudaStream_t stream);
  static std::string describe(const GemmArgs& a);
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan;
  using Key = std::string;
  static Key key(const GemmArgs& a);
  Plan& get(const GemmArgs& a);

  int device_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;  // Hopper's recommended cuBLASLt workspace
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace rlx::cuda
