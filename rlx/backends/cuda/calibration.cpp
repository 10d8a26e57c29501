// Measuring order: overheads and bandwidths first (a second), then each
// family in registration order with its share of what is left of the budget.
// Families measure through CalibContext::time_us, which replays the calls as a
// CUDA graph, so the times are those of programs (which replay graphs too),
// not of the host's launch rate.
#include "rlx/backends/cuda/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>
#include <mutex>

#include "rlx/backends/cuda/cudnn_graph.h"
#include "rlx/backends/cuda/kernels/attention.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/memory.h"
#include "rlx/core/log.h"
#include "rlx/runtime/cost_model.h"

namespace rlx::cuda {
namespace {

using Clock = CalibContext::Clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Family {
  std::string name;
  CalibrationFamilyFn fn;
  double weight;
};

std::vector<Family>& family_table() {
  static std::vector<Family> t;
  return t;
}
std::mutex& family_mu() {
  static std::mutex mu;
  return mu;
}

// ---- progress bar -------------------------------------------------------

class ProgressBar {
 public:
  explicit ProgressBar(bool on) : on_(on), tty_(on && isatty(STDERR_FILENO)) {}
  ~ProgressBar() { finish(); }
  void update(double fraction, const std::string& what) {
    if (!on_) return;
    fraction = std::clamp(fraction, 0.0, 1.0);
    if (tty_) {
      const int filled = static_cast<int>(fraction * kWidth);
      std::cerr << "\rcalibrate [" << std::string(static_cast<size_t>(filled), '#')
                << std::string(static_cast<size_t>(kWidth - filled), '.') << "] " << static_cast<int>(fraction * 100)
                << "% " << what.substr(0, 48) << "\033[K" << std::flush;
      drawn_ = true;
    } else if (what != last_) {  // a log, not a terminal: one line per stage
      std::cerr << "calibrate: " << static_cast<int>(fraction * 100) << "% " << what << "\n";
      last_ = what;
    }
  }
  void finish() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  static constexpr int kWidth = 30;
  bool on_, tty_, drawn_ = false;
  std::string last_;
};

// ---- device-wide overheads ----------------------------------------------

void measure_overheads(Calibration& c, CalibContext& ctx, DeviceBuffer& scratch) {
  cudaStream_t s = ctx.stream();
  float* one = static_cast<float*>(scratch.data());
  auto tiny = [one](cudaStream_t st) { launch_unary(UnaryFn::Relu, DType::F32, one, one, 1, st); };
  tiny(s);
  RLX_CUDA_CHECK(cudaStreamSynchronize(s));

  // Host cost of a direct launch: many launches, one sync at the end.
  constexpr int kLaunches = 2000;
  auto t0 = Clock::now();
  for (int i = 0; i < kLaunches; ++i) tiny(s);
  const double submit_us = seconds_since(t0) * 1e6 / kLaunches;
  RLX_CUDA_CHECK(cudaStreamSynchronize(s));
  c.launch_us = submit_us;

  // A kernel inside a replayed graph.
  c.graph_node_us = ctx.time_us(tiny);

  // Launch-to-host round trip: launch one tiny kernel and wait for it.
  constexpr int kSyncs = 300;
  t0 = Clock::now();
  for (int i = 0; i < kSyncs; ++i) {
    tiny(s);
    RLX_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  c.sync_us = std::max(0.0, seconds_since(t0) * 1e6 / kSyncs - submit_us);

  // Copy bandwidths: half the scratch onto the other half, and pinned host both ways.
  const size_t d2d = std::min<size_t>(scratch.size() / 2, size_t{512} << 20);
  char* base = static_cast<char*>(scratch.data());
  const double d2d_us = ctx.time_us([=](cudaStream_t st) {
    RLX_CUDA_CHECK(cudaMemcpyAsync(base + d2d, base, d2d, cudaMemcpyDeviceToDevice, st));
  });
  c.d2d_gbps = 2.0 * static_cast<double>(d2d) / (d2d_us * 1e3);  // read + write
  const size_t host_bytes = size_t{64} << 20;
  PinnedBuffer host(host_bytes);
  void* h = host.data();
  const double h2d_us = ctx.time_us([=](cudaStream_t st) {
    RLX_CUDA_CHECK(cudaMemcpyAsync(base, h, host_bytes, cudaMemcpyHostToDevice, st));
  });
  const double d2h_us = ctx.time_us([=](cudaStream_t st) {
    RLX_CUDA_CHECK(cudaMemcpyAsync(h, base, host_bytes, cudaMemcpyDeviceToHost, st));
  });
  c.h2d_gbps = static_cast<double>(host_bytes) / (h2d_us * 1e3);
  c.d2h_gbps = static_cast<double>(host_bytes) / (d2h_us * 1e3);
}

// ---- GEMM family ----------------------------------------------------------

// (N, K) of the linear layers of the embedding and LLM benchmark models, and
// the largest m each is measured at.
struct LinearShape {
  const char* model;
  int64_t n, k, max_m;
};
constexpr LinearShape kLinearShapes[] = {
    {"minilm qkv", 1152, 384, 32768},   {"minilm out", 384, 384, 32768},    {"minilm up", 1536, 384, 32768},
    {"minilm down", 384, 1536, 32768},  {"bert qkv", 2304, 768, 32768},     {"bert out", 768, 768, 32768},
    {"bert up", 3072, 768, 32768},      {"bert down", 768, 3072, 32768},    {"gemma q", 1024, 640, 8192},
    {"gemma kv", 256, 640, 8192},       {"gemma o", 640, 1024, 8192},       {"gemma gate/up", 2048, 640, 8192},
    {"gemma down", 640, 2048, 8192},    {"gemma logits", 262144, 640, 512},
};
// Every power of 2: cuBLASLt switches kernels between m and 2m, so coarser
// buckets leave shapes where a neighbour's winner is ~20% slower (seen on an
// H200 with powers of 4). About 600 buckets in all, within the GEMM share.
constexpr int64_t kMBuckets[] = {1,   2,   4,    8,    16,   32,   64,    128,
                                 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
constexpr int kGemmCandidates = 4;  // cuBLASLt's first few; later ones rarely win
constexpr DType kGemmDTypes[] = {DType::F16, DType::BF16, DType::F32};

std::vector<ShapeBucket> calibrate_gemm(CalibContext& ctx) {
  int64_t max_a = 0, max_b = 0, max_c = 0;
  size_t total = 0;
  for (const auto& s : kLinearShapes)
    for (int64_t m : kMBuckets)
      if (m <= s.max_m) {
        max_a = std::max(max_a, m * s.k), max_b = std::max(max_b, s.n * s.k), max_c = std::max(max_c, m * s.n);
        total += std::size(kGemmDTypes);
      }
  auto align = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t need = align(max_a * 4) + align(max_b * 4) + align(max_c * 4);
  RLX_CHECK(static_cast<size_t>(need) <= ctx.scratch_bytes(), "calibrate: the GEMM family needs ", need,
            " bytes of scratch, have ", ctx.scratch_bytes());
  char* base = static_cast<char*>(ctx.scratch());
  void* A = base;
  void* B = base + align(max_a * 4);
  void* C = base + align(max_a * 4) + align(max_b * 4);

  std::vector<ShapeBucket> out;
  size_t done = 0;
  for (DType dt : kGemmDTypes) {
    // Operands of this dtype in [−1, 1), as models run (the shared f16 fill
    // reads as bf16 or f32 values of other magnitudes, and the clock follows
    // the data: bf16 algorithms ranked apart from how they run on bf16 data).
    fill_uniform(base, static_cast<size_t>(need), dt);
    for (const auto& s : kLinearShapes) {
      for (int64_t m : kMBuckets) {
        if (m > s.max_m) continue;
        if (ctx.out_of_time()) return out;
        ctx.progress(static_cast<double>(done++) / static_cast<double>(total),
                     str("gemm ", dtype_name(dt), " m=", m, " n=", s.n, " k=", s.k));
        // A linear layer: x [m, k] · Wᵀ with W [n, k].
        GemmArgs g;
        g.dtype = dt;
        g.trans_b = true;
        g.M = m, g.N = s.n, g.K = s.k;
        g.A = A, g.lda = s.k;
        g.B = B, g.ldb = s.k;
        g.C = C, g.ldc = s.n;
        ShapeBucket bucket;
        bucket.family = gemm_family(g);
        bucket.shape = {m, s.n, s.k};
        const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
        const double bytes = static_cast<double>(dtype_size(dt)) * static_cast<double>(m * s.k + s.n * s.k + m * s.n);
        const auto cands = ctx.gemm().candidates(g);
        const size_t n_cand = std::min<size_t>(cands.size(), kGemmCandidates);
        std::vector<std::function<void(cudaStream_t)>> launches;
        GemmEngine* engine = &ctx.gemm();
        for (size_t r = 0; r < n_cand; ++r)
          launches.push_back([engine, g, rank = cands[r].rank](cudaStream_t st) { engine->run_candidate(g, rank, st); });
        std::vector<double> us = ctx.time_each_us(launches);
        // Few-microsecond GEMMs often finish within noise of each other: when
        // the two fastest are within 10%, time just those two again, longer,
        // so the winner is not decided by one noisy round; and algo 0 with
        // them, which the chooser keeps when within 3% of the winner (from
        // its first-round time alone an H100 kept it 6% slower).
        if (n_cand >= 2) {
          std::vector<size_t> order(n_cand);
          for (size_t r = 0; r < n_cand; ++r) order[r] = r;
          std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return us[a] < us[b]; });
          if (us[order[1]] < 1.10 * us[order[0]]) {
            std::vector<size_t> pick = {order[0], order[1]};
            if (order[0] != 0 && order[1] != 0) pick.push_back(0);
            std::vector<std::function<void(cudaStream_t)>> again_fns;
            for (size_t r : pick) again_fns.push_back(launches[r]);
            const std::vector<double> again = ctx.time_each_us(again_fns, 21);
            for (size_t i = 0; i < pick.size(); ++i) us[pick[i]] = again[i];
          }
        }
        for (size_t r = 0; r < n_cand; ++r)
          bucket.variants.push_back(VariantTiming{str("algo", cands[r].rank), us[r], flops / (us[r] * 1e3),
                                                  bytes / (us[r] * 1e3), cands[r].config});
        out.push_back(std::move(bucket));
      }
    }
  }
  return out;
}

// ---- attention family -----------------------------------------------------

struct AttentionShape {
  const char* model;
  int B, Lq, Lk, H, Hkv, D;
  bool causal;
};
constexpr AttentionShape kAttentionShapes[] = {
    {"minilm", 8, 128, 128, 12, 12, 32, false},    {"minilm", 8, 512, 512, 12, 12, 32, false},
    {"bert", 8, 128, 128, 12, 12, 64, false},      {"bert", 8, 512, 512, 12, 12, 64, false},
    {"gemma prefill", 1, 512, 512, 4, 1, 256, true}, {"gemma prefill", 1, 2048, 2048, 4, 1, 256, true},
    {"gemma decode", 1, 1, 512, 4, 1, 256, true},  {"gemma decode", 1, 1, 4096, 4, 1, 256, true},
    {"gemma decode", 1, 1, 32768, 4, 1, 256, true},
};

// A cuDNN SDPA plan for `p` bound to its buffers, with its workspace placed
// in the scratch after `used` bytes; null (with the reason) when cuDNN is
// unavailable or refuses the problem.
struct CudnnAttentionRun {
  cudnn::Execution exec;
  void* workspace;
  CudnnAttentionRun(std::shared_ptr<const cudnn::Plan> plan, std::vector<void*> ptrs, void* ws)
      : exec(std::move(plan), std::move(ptrs)), workspace(ws) {}
  void run(cudaStream_t s) { exec.run(workspace, s); }
};

std::shared_ptr<CudnnAttentionRun> cudnn_attention_variant(CalibContext& ctx, const AttentionParams& p, size_t used,
                                                           std::string* why) {
  if (p.dtype != DType::F16 && p.dtype != DType::BF16) {
    *why = "cuDNN attention is lowered for f16/bf16 only";
    return nullptr;
  }
  if (!cudnn::available(why)) return nullptr;
  cudnn::AttentionSpec spec;
  spec.dtype = p.dtype;
  spec.B = p.B, spec.Lq = p.Lq, spec.Lk = p.Lk, spec.H = p.H, spec.Hkv = p.Hkv, spec.D = p.D;
  spec.scale = p.scale;
  spec.causal = p.causal;
  spec.set_dense_strides();
  auto plan = cudnn::attention_plan(ctx.device(), spec, why);
  if (!plan) return nullptr;
  const size_t ws = cudnn::plan_workspace_bytes(*plan);
  if (used + ws > ctx.scratch_bytes()) {
    *why = str("workspace of ", ws, " bytes does not fit the scratch");
    return nullptr;
  }
  void* work = ws ? static_cast<char*>(ctx.scratch()) + used : nullptr;
  return std::make_shared<CudnnAttentionRun>(plan, std::vector<void*>{const_cast<void*>(p.q), const_cast<void*>(p.k),
                                                                      const_cast<void*>(p.v), p.out},
                                             work);
}

std::vector<ShapeBucket> calibrate_attention(CalibContext& ctx) {
  std::vector<ShapeBucket> out;
  const DType dtypes[] = {DType::F16, DType::BF16, DType::F32};
  const size_t total = std::size(kAttentionShapes) * std::size(dtypes);
  size_t done = 0;
  for (DType dt : dtypes) {
    for (const auto& s : kAttentionShapes) {
      if (ctx.out_of_time()) return out;
      ctx.progress(static_cast<double>(done++) / static_cast<double>(total),
                   str("attention ", dtype_name(dt), " ", s.model, " Lq=", s.Lq, " Lk=", s.Lk));
      AttentionParams p;
      p.dtype = dt;
      p.B = s.B, p.Lq = s.Lq, p.Lk = s.Lk, p.H = s.H, p.Hkv = s.Hkv, p.D = s.D;
      p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      p.causal = s.causal;
      p.set_dense_strides();
      // Q, out, K, V and the workspace side by side in the scratch (256-byte
      // aligned, as the backend's arena places them). The pointers are set
      // before attention_workspace_bytes, which validates them and picks the
      // path (which depends on their alignment).
      const int64_t e = dtype_size(dt);
      const int64_t q_bytes = int64_t{s.B} * s.Lq * s.H * s.D * e, kv_bytes = int64_t{s.B} * s.Lk * s.Hkv * s.D * e;
      auto align = [](int64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); };
      const size_t io_bytes = align(q_bytes) * 2 + align(kv_bytes) * 2;
      RLX_CHECK(io_bytes <= ctx.scratch_bytes(), "calibrate: attention ", s.model, " Lq=", s.Lq, " Lk=", s.Lk,
                " needs ", io_bytes, " bytes of scratch, have ", ctx.scratch_bytes());
      char* base = static_cast<char*>(ctx.scratch());
      p.q = base;
      p.out = base + align(q_bytes);
      p.k = base + 2 * align(q_bytes);
      p.v = base + 2 * align(q_bytes) + align(kv_bytes);
      const size_t ws = align(static_cast<int64_t>(attention_workspace_bytes(p)));
      RLX_CHECK(io_bytes + ws <= ctx.scratch_bytes(), "calibrate: attention ", s.model, " Lq=", s.Lq, " Lk=", s.Lk,
                " needs ", io_bytes + ws, " bytes of scratch with its workspace, have ", ctx.scratch_bytes());
      void* work = ws ? base + io_bytes : nullptr;
      ShapeBucket bucket;
      bucket.family = str("attention.", dtype_name(dt));
      bucket.shape = {int64_t{s.B} * s.H, s.Lq, s.Lk, s.D};
      double flops = 4.0 * s.B * s.H * static_cast<double>(s.Lq) * s.Lk * s.D;
      if (s.causal && s.Lq == s.Lk) flops *= 0.5;
      const double bytes = static_cast<double>(2 * q_bytes + 2 * kv_bytes);
      // One launchable path per shape today (launch_attention picks it);
      // a path that can be forced would be a second variant here.
      std::vector<std::function<void(cudaStream_t)>> launches = {
          [p, work](cudaStream_t st) { launch_attention(p, work, st); }};
      std::vector<std::string> names = {attention_path_name(attention_path(p))};
      // The cuDNN graph path competes for the same problem when cuDNN takes it
      // (lower_cudnn.cpp picks whichever of the two was faster here).
      std::string why;
      if (auto exec = cudnn_attention_variant(ctx, p, io_bytes + ws, &why)) {
        launches.push_back([exec](cudaStream_t st) { exec->run(st); });
        names.push_back(kCudnnAttentionVariant);
      } else {
        log_verbose("calibrate: attention ", s.model, " Lq=", s.Lq, " Lk=", s.Lk, ": no cudnn variant (", why, ")");
      }
      const std::vector<double> us = ctx.time_each_us(launches);
      for (size_t i = 0; i < us.size(); ++i)
        bucket.variants.push_back(VariantTiming{names[i], us[i], flops / (us[i] * 1e3), bytes / (us[i] * 1e3), {}});
      out.push_back(std::move(bucket));
    }
  }
  return out;
}

void register_builtin_families() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_calibration_family("gemm", calibrate_gemm, 3.0);
    register_calibration_family("attention", calibrate_attention, 2.0);  // cuDNN plans take time to build
  });
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

CalibContext::CalibContext(int device, cudaStream_t stream, GemmEngine& gemm, void* scratch, size_t scratch_bytes,
                           Clock::time_point deadline, std::function<void(double, const std::string&)> progress)
    : device_(device), stream_(stream), gemm_(gemm), scratch_(scratch), scratch_bytes_(scratch_bytes),
      deadline_(deadline), progress_(std::move(progress)) {}

double CalibContext::time_us(const std::function<void(cudaStream_t)>& launch, int rounds) {
  return time_each_us({launch}, rounds)[0];
}

std::vector<double> CalibContext::time_each_us(const std::vector<std::function<void(cudaStream_t)>>& launches,
                                               int rounds) {
  RLX_CHECK(rounds >= 1, "calibrate: time_each_us needs at least one round, got ", rounds);
  Event e0, e1;
  std::vector<GraphExec> graphs;
  std::vector<int> calls;
  for (const auto& launch : launches) {
    // One call, timed, sizes the graph: enough calls for ~300 us of work, 1..100.
    launch(stream_);  // warm-up (module load, first touch)
    e0.record(stream_);
    launch(stream_);
    e1.record(stream_);
    e1.synchronize();
    const double single_us = std::max(1e-3, static_cast<double>(e1.elapsed_ms_since(e0)) * 1e3);
    calls.push_back(std::clamp(static_cast<int>(300.0 / single_us), 1, 100));

    cudaGraph_t graph = nullptr;
    RLX_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      for (int i = 0; i < calls.back(); ++i) launch(stream_);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    RLX_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    graphs.emplace_back(graph);
    cudaGraphDestroy(graph);
    graphs.back().launch(stream_);  // warm-up replay
  }
  // Round-robin replays; the median of each variant's rounds.
  std::vector<std::vector<double>> samples(launches.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < graphs.size(); ++i) {
      e0.record(stream_);
      graphs[i].launch(stream_);
      e1.record(stream_);
      e1.synchronize();
      samples[i].push_back(static_cast<double>(e1.elapsed_ms_since(e0)) * 1e3 / calls[i]);
    }
  std::vector<double> us;
  for (auto& t : samples) {
    std::sort(t.begin(), t.end());
    us.push_back(t[t.size() / 2]);
  }
  return us;
}

void register_calibration_family(const std::string& name, CalibrationFamilyFn fn, double weight) {
  RLX_CHECK(!name.empty() && fn, "register_calibration_family: a family needs a name and a function");
  RLX_CHECK(weight > 0, "register_calibration_family: '", name, "' weight ", weight, " must be positive");
  std::lock_guard lock(family_mu());
  auto& t = family_table();
  for (auto& f : t)
    if (f.name == name) {  // re-registration replaces, like the kernel registry
      f.fn = std::move(fn), f.weight = weight;
      return;
    }
  t.push_back(Family{name, std::move(fn), weight});
}

std::vector<std::string> calibration_families() {
  register_builtin_families();
  std::lock_guard lock(family_mu());
  std::vector<std::string> names;
  for (const auto& f : family_table()) names.push_back(f.name);
  return names;
}

CalibrationIdentity device_identity(int device) {
  const DeviceProps& p = device_props(device);
  CalibrationIdentity id;
  id.gpu_name = p.name;
  id.gpu_uuid = p.uuid;
  id.driver = version_string(p.driver_version);
  id.cuda_runtime = version_string(p.runtime_version);
  id.cublaslt = std::to_string(cublasLtGetVersion());
  id.rlx = rlx_version();
  return id;
}

Calibration measure_calibration(int device, const CalibrateRequest& req) {
  register_builtin_families();
  register_all_lowerings();  // families register from their lowering registration
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(req.budget_s));
  DeviceGuard guard(device);
  Calibration c;
  c.identity = device_identity(device);
  c.created_utc = utc_now();

  std::vector<Family> families;
  {
    std::lock_guard lock(family_mu());
    families = family_table();
  }
  Stream stream;
  GemmEngine gemm(device);
  gemm.set_timed_choice(false);  // calibration times the candidates itself, within its budget
  // 2 GiB of scratch covers the largest built-in bucket (the 262144-wide logits
  // GEMM in f32 with its activations); filled with random f16 values, which
  // also read as finite bf16 and f32 ones. Data moves the clock a kernel runs
  // at: on a constant byte pattern (the fill until session 43) an H100 ranked
  // Gemma's m = 512 down-projection algorithms 6% apart from how they run on
  // random operands, and the engine's own timing (random operands) disagreed.
  const size_t scratch_bytes = size_t{2} << 30;
  DeviceBuffer scratch(device, scratch_bytes, "calibration scratch");
  fill_uniform(scratch.data(), scratch_bytes, DType::F16);

  ProgressBar bar(req.progress);
  const double stages = 1.0 + static_cast<double>(families.size());
  CalibContext overhead_ctx(device, stream.get(), gemm, scratch.data(), scratch_bytes, end,
                            [&](double, const std::string& w) { bar.update(0, w); });
  bar.update(0, "launch, sync and copy overheads");
  measure_overheads(c, overhead_ctx, scratch);
  log_verbose("calibration: launch ", c.launch_us, " us, graph node ", c.graph_node_us, " us, sync ", c.sync_us,
              " us, d2d ", c.d2d_gbps, " GB/s, h2d ", c.h2d_gbps, " GB/s, d2h ", c.d2h_gbps, " GB/s");

  double weight_left = 0;
  for (const auto& f : families) weight_left += f.weight;
  for (size_t i = 0; i < families.size(); ++i) {
    const Family& f = families[i];
    const auto now = Clock::now();
    const double left_s = std::chrono::duration<double>(end - now).count();
    const auto deadline = now + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(std::max(0.0, left_s) * f.weight / weight_left));
    weight_left -= f.weight;
    const double stage0 = (1.0 + static_cast<double>(i)) / stages;
    CalibContext ctx(device, stream.get(), gemm, scratch.data(), scratch_bytes, deadline,
                     [&](double frac, const std::string& what) { bar.update(stage0 + frac / stages, what); });
    const size_t before = c.buckets.size();
    const double share_s = std::chrono::duration<double>(deadline - now).count();
    try {
      for (auto& b : f.fn(ctx)) c.buckets.push_back(std::move(b));
      if (ctx.cut_short())
        c.problems.push_back(str(f.name, ": its ", share_s, " s share of the ", req.budget_s,
                                 " s budget ran out after ", c.buckets.size() - before, " shape buckets"));
    } catch (const Error& e) {
      // One family failing must not lose the others' measurements (its own are lost).
      c.problems.push_back(str(f.name, ": failed: ", e.what()));
    }
    log_verbose("calibration: ", f.name, ": ", c.buckets.size() - before, " shape buckets measured");
  }
  bar.update(1.0, "done");
  bar.finish();
  c.measure_s = seconds_since(t0);
  c.complete = c.problems.empty();
  for (const auto& p : c.problems) log_warn("calibration incomplete: ", p);
  return c;
}

const std::optional<Calibration>& device_calibration(int device) {
  static std::mutex mu;
  static std::map<int, std::optional<Calibration>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;

  std::string mode = env_string("RLX_CALIBRATE");
  std::transform(mode.begin(), mode.end(), mode.begin(), [](unsigned char ch) { return std::tolower(ch); });
  RLX_CHECK(mode == "off" || mode == "auto" || mode == "force", "RLX_CALIBRATE='", mode,
            "' is not one of off, auto, force");
  const CalibrationIdentity id = device_identity(device);
  const std::string path = calibration_path(id.gpu_uuid);
  std::optional<Calibration> result;
  if (mode != "force") {
    LoadResult r = load_calibration(path, id);
    if (r.status == CalibrationLoad::Loaded) result = std::move(r.calibration);
  }
  if (!result && mode != "off") {
    log_verbose("calibration: measuring cuda:", device, " (RLX_CALIBRATE=", mode, ")");
    result = measure_calibration(device);
    save_calibration(*result, path);
    log_verbose("calibration: measured in ", result->measure_s, " s, saved ", path);
  }
  return cache.emplace(device, std::move(result)).first->second;
}

GemmAlgoChooser gemm_chooser(const Calibration& c) {
  auto model = std::make_shared<CostModel>(gpu_rates_from(c, "cuda"), c);
  return [model](const GemmArgs& a, const std::vector<GemmAlgo>& cands) -> std::pair<int, std::string> {
    // The buckets are single x·Wᵀ products (linear layers); other layouts and
    // strided batches run other kernels, so their times say nothing here.
    if (a.trans_a || !a.trans_b || a.batch != 1)
      return {0, "heuristic: algo 0 (calibrated for unbatched x·Wᵀ only)"};
    const auto choice = model->choose_variant(gemm_family(a), {a.M * a.batch, a.N, a.K}, CostModel::kBorrowDistance);
    if (!choice) return {0, "heuristic: algo 0 (no calibrated bucket near this shape)"};
    const auto& sh = choice->bucket->shape;
    // A winner within 3% of cuBLASLt's own first choice is within the noise
    // of a few-microsecond GEMM: keep the first choice then.
    if (!cands.empty() && choice->timing->variant != "algo0")
      for (const auto& v : choice->bucket->variants)
        if (v.variant == "algo0" && v.us > 0 && v.us <= 1.03 * choice->timing->us && v.config == cands[0].config)
          return {0, str("calibrated: algo 0 (within 3% of the winner ", choice->timing->variant, " at m=", sh[0],
                         " n=", sh[1], " k=", sh[2], ")")};
    for (const auto& cand : cands)
      if (cand.config == choice->timing->config)
        return {cand.rank, str("calibrated: algo ", cand.rank, " (won as ", choice->timing->variant, " at m=", sh[0],
                               " n=", sh[1], " k=", sh[2], ", predicted ", choice->predicted.value, " us)")};
    return {0, str("heuristic: algo 0 (the winner at m=", sh[0], " n=", sh[1], " k=", sh[2],
                   " is not a candidate here)")};
  };
}

}  // namespace rlx::cuda
