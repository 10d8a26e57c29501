// CUDA calibration (`rlx calibrate`, or RLX_CALIBRATE=auto|force on first use
// of a GPU): measures launch and sync overhead, copy bandwidths, and every
// registered kernel family's variants over shape buckets, within a time budget
// (30 s), with a progress bar on stderr. The result is the store of
// rlx/runtime/calibration.h, cached per GPU UUID.
//
// Families: "gemm" (cuBLASLt's top heuristic algorithms per dtype and shape
// bucket; the winner is what GemmEngine runs) and "attention" (each attention
// path per shape) are built in. Other kernel families add themselves with
// register_calibration_family(), from their register_*_lowerings() function
// (which the backend runs before any calibration), without editing this file.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/runtime/calibration.h"

namespace rlx::cuda {

// The attention family's name for the cuDNN SDPA variant, and how far (sum
// of |log2| shape ratios) a bucket may be from a problem for lower_cudnn.cpp
// to follow its winner.
inline constexpr const char* kCudnnAttentionVariant = "cudnn";
inline constexpr double kAttentionBorrowDistance = 2.0;

// What a family's measuring function gets.
class CalibContext {
 public:
  using Clock = std::chrono::steady_clock;
  CalibContext(int device, cudaStream_t stream, GemmEngine& gemm, void* scratch, size_t scratch_bytes,
               Clock::time_point deadline, std::function<void(double, const std::string&)> progress);

  int device() const { return device_; }
  const DeviceProps& props() const { return device_props(device_); }
  cudaStream_t stream() const { return stream_; }
  GemmEngine& gemm() { return gemm_; }
  // Device memory the family may use freely (filled with small non-zero values).
  void* scratch() const { return scratch_; }
  size_t scratch_bytes() const { return scratch_bytes_; }

  // True once this family's share of the budget is spent: measure nothing more.
  // A family that saw true is recorded as cut short (cut_short()).
  bool out_of_time() {
    if (Clock::now() >= deadline_) cut_short_ = true;
    return cut_short_;
  }
  bool cut_short() const { return cut_short_; }
  // Reports progress within the family (0..1) and what is being measured.
  void progress(double fraction, const std::string& what) const { progress_(fraction, what); }

  // GPU time of one call of `launch`, in microseconds: the calls are captured
  // back to back into a CUDA graph (as programs run them, ~300 us of work per
  // graph) and the median of `rounds` replays is divided by the number of calls.
  double time_us(const std::function<void(cudaStream_t)>& launch, int rounds = 5);
  // The same for competing variants of one problem, replayed in turn round
  // after round so that clock changes affect them all alike.
  std::vector<double> time_each_us(const std::vector<std::function<void(cudaStream_t)>>& launches, int rounds = 5);

 private:
  int device_;
  cudaStream_t stream_;
  GemmEngine& gemm_;
  void* scratch_;
  size_t scratch_bytes_;
  Clock::time_point deadline_;
  bool cut_short_ = false;
  std::function<void(double, const std::string&)> progress_;
};

// Measures one family; returns its buckets (family names inside the buckets
// are the family's own, e.g. "gemm.f16"). `weight` is its share of the budget.
using CalibrationFamilyFn = std::function<std::vector<ShapeBucket>(CalibContext&)>;
void register_calibration_family(const std::string& name, CalibrationFamilyFn fn, double weight = 1.0);
std::vector<std::string> calibration_families();

// The identity a cache file must match to be used on `device`.
CalibrationIdentity device_identity(int device);

struct CalibrateRequest {
  double budget_s = 30.0;
  bool progress = true;  // bar on stderr (redrawn in place on a terminal)
};
// Measures now (does not read or write the cache).
Calibration measure_calibration(int device, const CalibrateRequest& req = {});

// The calibration the backend uses for `device`, once per process: a valid
// cache file is loaded; with RLX_CALIBRATE=auto a missing, stale or corrupt
// one is measured and saved, with force it is always measured; with off
// (the default) nothing is measured. nullopt when there is none.
const std::optional<Calibration>& device_calibration(int device);

// The GEMM algorithm chooser built from a calibration (what the backend gives
// its GemmEngine): for unbatched x·Wᵀ problems (the layout measured), the
// config that won at the nearest measured bucket, when
// that bucket is very close (CostModel::kBorrowDistance) and the config is
// among the problem's candidates (found by its config: a rank in another
// shape's list may name another kernel); otherwise cuBLASLt's first choice.
GemmAlgoChooser gemm_chooser(const Calibration& c);

}  // namespace rlx::cuda
