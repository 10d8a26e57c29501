// The cost model: predicts a node's time on a device from its work (FLOPs and
// bytes moved) and the device's rates — calibrated (rlx/runtime/calibration.h)
// or a plain built-in heuristic when no calibration exists — and uses it to
// choose kernel variants per shape and, for Session("auto"), CPU or GPU.
//
//   time = overhead + max(FLOPs / rate, bytes / bandwidth)
//
// Quantities are strong types, so a GFLOP/s can never be used as a FLOP/s
// (the seed's defect, DESIGN §9): dividing Flops by a GflopRate gives Micros,
// and the mismatched combinations do not compile.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/runtime/calibration.h"

namespace rlx {

namespace units {

struct Flops { double value = 0; };          // floating-point operations
struct Bytes { double value = 0; };          // bytes moved
struct Micros {                              // microseconds
  double value = 0;
  friend Micros operator+(Micros a, Micros b) { return {a.value + b.value}; }
  friend Micros operator*(double k, Micros a) { return {k * a.value}; }
  Micros& operator+=(Micros o) { value += o.value; return *this; }
  friend auto operator<=>(Micros a, Micros b) = default;
};
struct GflopRate { double value = 0; };      // 1e9 FLOP per second
struct GbyteRate { double value = 0; };      // 1e9 bytes per second

// 1 GFLOP/s is 1e3 FLOP per microsecond (and 1 GB/s is 1e3 bytes per microsecond).
inline Micros operator/(Flops f, GflopRate r) { return {f.value / (r.value * 1e3)}; }
inline Micros operator/(Bytes b, GbyteRate r) { return {b.value / (r.value * 1e3)}; }
inline Micros max(Micros a, Micros b) { return a.value >= b.value ? a : b; }

}  // namespace units

// What one device does per second and per launch.
struct DeviceRates {
  std::string device;                  // "cpu", "cuda:0"
  bool calibrated = false;             // measured (true) or the built-in heuristic
  units::Micros per_node;              // overhead of each node (launch, or a replayed graph node)
  units::Micros per_run;               // overhead of each run (host sync)
  units::GbyteRate memory;             // device memory bandwidth
  units::GbyteRate host_link;          // inputs in and outputs out (infinite for the CPU: 0 = none)
  units::GflopRate matmul_f32;         // dense GEMM, f32
  units::GflopRate matmul_half;        // dense GEMM, f16/bf16
  units::GflopRate other;              // elementwise, norms, reductions (per element op)
};

// Plain built-in rates for an H100/H200-class GPU without calibration, and for a
// CPU of `threads` threads; always usable.
DeviceRates heuristic_gpu_rates();
DeviceRates heuristic_cpu_rates(int threads);
// GPU rates from a calibration (GEMM rates are the best measured at large m).
DeviceRates gpu_rates_from(const Calibration& c, const std::string& device);

// The work of one node of a static graph.
struct NodeWork {
  units::Flops flops;
  units::Bytes bytes;
  enum class Kind { None, Matmul, Attention, Other } kind = Kind::None;  // None: leaves and views
};
NodeWork node_work(const Graph& g, NodeId id);

class CostModel {
 public:
  explicit CostModel(DeviceRates rates, std::optional<Calibration> calibration = std::nullopt);

  const DeviceRates& rates() const { return rates_; }
  const Calibration* calibration() const { return calib_ ? &*calib_ : nullptr; }

  // Predicted time of one node of a static graph (0 for leaves).
  units::Micros predict_node(const Graph& g, NodeId id) const;
  // The whole graph: every node, one per-run overhead, and the host transfers
  // of inputs and outputs.
  units::Micros predict_graph(const Graph& g) const;

  // Rate of a GEMM of this dtype and shape: the best measured variant of the
  // nearest calibrated bucket, else the heuristic rate for its dtype.
  units::GflopRate matmul_rate(DType dtype, int64_t m, int64_t n, int64_t k) const;

  // Variant choice: the fastest measured variant of `family` at the bucket
  // nearest to `shape`, accepted only within `max_distance` (sum of |log2|
  // ratios over the dims). nullopt without a close enough calibrated bucket.
  // Kernel libraries switch kernels between shapes a factor 2 apart, so a
  // winner is only borrowed from a bucket within kBorrowDistance (m within
  // ~1.4x, n and k equal); further away the library's own heuristic is better.
  static constexpr double kBorrowDistance = 0.5;
  struct Choice {
    const VariantTiming* timing;   // into the calibration
    const ShapeBucket* bucket;
    units::Micros predicted;       // the measured time, scaled by the FLOP ratio to `shape`
  };
  std::optional<Choice> choose_variant(const std::string& family, const std::vector<int64_t>& shape,
                                       double max_distance) const;

 private:
  DeviceRates rates_;
  std::optional<Calibration> calib_;
};

// Session("auto"): CPU or GPU for one static graph.
struct DeviceChoice {
  bool use_gpu = true;
  units::Micros cpu, gpu;  // predicted time of one run
  std::string reason;      // one line for RLX_VERBOSE / the dispatch report
};
DeviceChoice choose_device(const Graph& g, const CostModel& cpu, const CostModel& gpu);

}  // namespace rlx
