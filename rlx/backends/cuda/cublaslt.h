// cuBLASLt GEMM (the MPS BLAS analogue): row-major C = act(op(A)·op(B) + bias)
// with optional strided batches. Descriptors, layouts and the chosen
// algorithm are cached per problem (shape, strides, dtype, epilogue,
// alignment); plan() does the host-side work so that run() — which may be
// captured into a CUDA graph — only launches.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

// rlx's Hopper GEMM kernels (kernels/gemm_sm90.h): Classic (a 128 × 128 tile
// per CTA, two CTAs per SM, the thread issuing the copies also computing) and
// PingPong (persistent and warp-specialized: a producer warpgroup, two
// consumer warpgroups taking tiles in turn so one's epilogue overlaps the
// other's MMAs). Auto: the launcher's default.
enum class Sm90GemmKernel { Auto, Classic, PingPong };

class GemmChoiceFile;  // gemm_choices.h

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
  // [M, N] (leading dimension ldc, batch stride stride_c) or null: added to the
  // product and bias before `act` (cuBLASLt's C input with beta = 1; C is then
  // the output D). rlx's sm90 kernels refuse it.
  const void* residual = nullptr;
  Activation act = Activation::None;  // None, Relu or GeluTanh (cuBLASLt's GELU is the tanh form)
  bool allow_tf32 = false;
  // FP8 operands (ScaledMatMul): A and B stored as F8E4M3 or F8E5M2 (not both
  // e5m2) while `dtype` is C's and the bias's (f16/bf16 bias only); only
  // trans_a = false, trans_b = true (cuBLASLt's FP8 layout). Count_: `dtype`.
  DType a_dtype = DType::Count_, b_dtype = DType::Count_;
  // Device f32 scales multiplied into the product: one value, or with
  // *_rows one per row of A (M values) / of B (N values). Null: 1.
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  bool scale_a_rows = false, scale_b_rows = false;

  DType a_type() const { return a_dtype == DType::Count_ ? dtype : a_dtype; }
  DType b_type() const { return b_dtype == DType::Count_ ? dtype : b_dtype; }
  bool fp8() const { return a_type() != dtype || b_type() != dtype; }
};

// Whether cuBLASLt can apply `act` in its epilogue (GELU-erf and SiLU cannot).
bool cublaslt_epilogue_supports(Activation act);

// One algorithm cuBLASLt's heuristic offers for a problem. `config` holds the
// algorithm's identity (id, tile, split-k, reduction, swizzle, custom option,
// stages, inner and cluster shape) so a choice measured on one problem can be
// found again among the candidates of a similar one.
struct GemmAlgo {
  int rank = 0;  // position in the heuristic's list (0 = its first choice)
  std::vector<int64_t> config;
  size_t workspace_bytes = 0;
};

// Calibration family name of a problem: "gemm.f16", "gemm.bf16", "gemm.f32",
// "gemm.tf32", "gemm.fp8"; its shape is {M·batch, N, K}.
std::string gemm_family(const GemmArgs& a);

// `bytes` of device memory at `p` as values of `t` (f32, f16 or bf16) in
// [-1, 1), or finite fp8 codes: a 1 MB pattern uploaded, then doubled by device copies. Operands
// for timing: a GEMM's power draw, and so its clock, depends on its data
// (constant operands ranked cuBLASLt algorithms differently on an H100).
// f16 values also read as finite f32 and bf16 values (their exponents stay
// small), so a buffer shared by all three types takes t = F16.
void fill_uniform(void* p, size_t bytes, DType t);

// Picks, among a problem's candidates, the algorithm to run (the engine's
// default is the heuristic's first). Returns the rank and a note for the
// dispatch report, e.g. "calibrated: algo 2 won at m=512 n=1536 k=384".
// Problems of 2 GFLOP and more are instead timed on their own shape when
// first planned (RLX_CUDA_GEMM_TUNE, on by default).
using GemmAlgoChooser = std::function<std::pair<int, std::string>(const GemmArgs&, const std::vector<GemmAlgo>&)>;

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

  // Up to kMaxCandidates algorithms for the problem, heuristic order.
  static constexpr int kMaxCandidates = 16;
  std::vector<GemmAlgo> candidates(const GemmArgs& a);
  // Launches candidate `rank` instead of the chosen one (calibration, tests).
  void run_candidate(const GemmArgs& a, int rank, cudaStream_t stream);
  // The rank run() uses for this problem and how it was chosen.
  int chosen_rank(const GemmArgs& a);
  std::string choice_note(const GemmArgs& a);
  // Set before planning (problems already planned keep their choice).
  void set_algo_chooser(GemmAlgoChooser chooser);
  // Whether large problems are timed on their own shape when first planned
  // (default: RLX_CUDA_GEMM_TUNE). Calibration, which times candidates
  // itself, turns it off.
  void set_timed_choice(bool on);

  // Which of rlx's Hopper GEMM kernels (kernels/gemm_sm90.h) runs `a` with
  // `act` fused, or none: cuBLASLt with a.act in its epilogue followed, when
  // a.act != act, by `act` as a separate kernel. RLX_CUDA_SM90_GEMM (read on
  // each call): auto times cuBLASLt and rlx's kernels on scratch
  // operands the first time a shape of 2 GFLOP or more is planned (without
  // an activation to fuse, only at K ≤ 512) and keeps the fastest (other
  // shapes stay on cuBLASLt); 1 always where a kernel applies; 0 never. `note` gets the reason, for the dispatch report.
  std::optional<Sm90GemmKernel> prefer_sm90(const GemmArgs& a, Activation act, std::string* note = nullptr);

 private:
  struct Plan;
  using Key = std::string;
  static Key key(const GemmArgs& a);
  Plan& get(const GemmArgs& a);
  bool choose_by_timing(const GemmArgs& a, Plan& p);  // false: no scratch memory (choice unchanged)
  void keep_algo(const std::string& shape, const std::vector<int64_t>& config);
  void keep_sm90(const std::string& shape, std::optional<Sm90GemmKernel> choice);

  int device_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;  // Hopper's recommended cuBLASLt workspace
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<std::string, std::vector<int64_t>> tuned_;  // shape (no alignments) -> the measured winner's config
  // A winner lent to shapes whose M is within the same power of two (near_fields in cublaslt.cpp).
  template <typename Choice>
  struct NearChoice {
    Choice config;
    int64_t M;  // the shape that was timed
  };
  std::map<std::string, NearChoice<std::vector<int64_t>>> tuned_near_;
  GemmAlgoChooser chooser_;
  bool timed_choice_;
  std::map<std::string, std::optional<Sm90GemmKernel>> sm90_choice_;  // shape + activations -> prefer_sm90's answer
  std::map<std::string, NearChoice<std::optional<Sm90GemmKernel>>> sm90_near_;
  std::unique_ptr<GemmChoiceFile> choice_file_;  // tuned_ and sm90_choice_ across processes (RLX_CUDA_GEMM_CACHE)
};

}  // namespace rlx::cuda
