// GEMM through rlx's cuBLASLt engine (cached descriptors and algorithm) on
// the shapes that matter: square 4096/8192 and the BERT projections at
// 256×128 tokens. Random data, inputs rotated across buffers larger than L2,
// CUDA events, median of 30 runs. Peer: bench/gemm_torch.py (torch.matmul).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/gemm_ln_sm90.h"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/kernels/scaled_matmul.h"
#include "rlx/backends/cuda/memory.h"
#include "rlx/core/error.h"
#include "rlx/core/half.h"

using namespace rlx;
using namespace rlx::cuda;

namespace {

struct GemmShape {
  int64_t M, N, K;
  const char* what;
};

void fill_random(DeviceBuffer& b, DType t) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const size_t n = b.size() / static_cast<size_t>(dtype_size(t));
  std::vector<uint16_t> h(n);
  for (auto& v : h) {
    float f = d(rng);
    v = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
  }
  b.upload(h.data(), n * 2);
}

// Median ms of `launch` over 30 event-timed runs after 5 warm-up runs.
template <typename F>
double median_ms(Stream& stream, F&& launch) {
  for (int i = 0; i < 5; ++i) launch(i);
  std::vector<double> ms;
  Event e0, e1;
  for (int i = 0; i < 30; ++i) {
    e0.record(stream.get());
    launch(i);
    e1.record(stream.get());
    e1.synchronize();
    ms.push_back(e1.elapsed_ms_since(e0));
  }
  return bench::median(ms);
}

// Times every cuBLASLt candidate of `g` (the engine's rank order): rank, ms,
// TFLOP/s and the algorithm's configuration, one line each.
void time_each_candidate(GemmEngine& engine, Stream& stream, const GemmArgs& g, const char* label) {
  const double flop = 2.0 * double(g.M) * double(g.N) * double(g.K);
  for (const GemmAlgo& cand : engine.candidates(g)) {
    const double ms = median_ms(stream, [&](int) { engine.run_candidate(g, cand.rank, stream.get()); });
    std::string cfg;
    for (int64_t v : cand.config) cfg += str(v, " ");
    std::printf("  %-16s rank %d %8.4f ms %7.1f TFLOP/s  [%s]\n", label, cand.rank, ms, flop / (ms * 1e-3) / 1e12,
                cfg.c_str());
  }
}

// Every cuBLASLt candidate of the embedding models' linear layers, f16 with
// the bias epilogue as the models run them: shows what the heuristic's first
// choice leaves on the table (calibration picks among these).
template <size_t N>
void candidates(GemmEngine& engine, Stream& stream, const GemmShape (&shapes)[N]) {
  std::printf("\ncandidates (f16, bias epilogue): rank, ms, TFLOP/s, config\n");
  for (const GemmShape& s : shapes) {
    if (s.M != 32768) continue;
    const int64_t e = 2;
    DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e)), b(0, static_cast<size_t>(s.K * s.N * e)),
        c(0, static_cast<size_t>(s.M * s.N * e)), bias(0, static_cast<size_t>(s.N * e));
    fill_random(a, DType::F16);
    fill_random(b, DType::F16);
    fill_random(bias, DType::F16);
    GemmArgs g;
    g.dtype = DType::F16;
    g.M = s.M, g.N = s.N, g.K = s.K;
    g.trans_b = true;
    g.A = a.data(), g.lda = s.K;
    g.B = b.data(), g.ldb = s.K;
    g.C = c.data(), g.ldc = s.N;
    g.bias = bias.data();
    time_each_candidate(engine, stream, g, s.what);
  }
}

// The square shapes (no bias, as torch.matmul runs them): the engine's
// choice and how it was made, then every cuBLASLt candidate timed the same
// way, to see whether the timed choice (RLX_CUDA_GEMM_TUNE) or cuBLASLt's
// own order is what stands between rlx and torch there.
template <size_t N>
void square_candidates(GemmEngine& engine, Stream& stream, const GemmShape (&shapes)[N]) {
  std::printf("\nsquare shapes: the engine's choice, then every candidate (rank, ms, TFLOP/s, config)\n");
  for (DType t : {DType::BF16, DType::F16})
    for (const GemmShape& s : shapes) {
      if (s.M != s.N || s.N != s.K) continue;
      const int64_t e = 2;
      DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e)), b(0, static_cast<size_t>(s.K * s.N * e)),
          c(0, static_cast<size_t>(s.M * s.N * e));
      fill_random(a, t);
      fill_random(b, t);
      GemmArgs g;
      g.dtype = t;
      g.M = s.M, g.N = s.N, g.K = s.K;
      g.trans_b = true;
      g.A = a.data(), g.lda = s.K;
      g.B = b.data(), g.ldb = s.K;
      g.C = c.data(), g.ldc = s.N;
      engine.plan(g);
      const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
      const double chosen = median_ms(stream, [&](int) { engine.run(g, stream.get()); });
      std::printf("  %s %lld^3 chosen rank %d (%s): %.4f ms %.1f TFLOP/s\n", std::string(dtype_name(t)).c_str(),
                  static_cast<long long>(s.M), engine.chosen_rank(g), engine.choice_note(g).c_str(), chosen,
                  flop / (chosen * 1e-3) / 1e12);
      time_each_candidate(engine, stream, g, str(dtype_name(t), " ", s.M, "^3").c_str());
    }
}

// rlx's Hopper GEMMs against cuBLASLt on the embedding models' linear layers
// (f16, bias; the FFN up projection also with GELU-erf, which cuBLASLt runs
// as a separate pass): each kernel's median and its largest difference from
// cuBLASLt's output, |got − ref| / (1 + |ref|), over every 7th element.
template <size_t N>
void sm90_kernels(GemmEngine& engine, Stream& stream, const GemmShape (&shapes)[N]) {
  if (!sm90_gemm_available(0)) {
    std::printf("\nsm90 kernels: not available on this device/build; skipped\n");
    return;
  }
  const Sm90GemmKernel kernels[] = {Sm90GemmKernel::Classic, Sm90GemmKernel::PingPong};
  std::printf("\nsm90 GEMM kernels vs cuBLASLt (f16, bias; ms, TFLOP/s, speed-up, max diff)\n");
  for (const GemmShape& s : shapes) {
    if (s.M != 32768) continue;
    const int64_t e = 2, rot = 4;
    DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e * rot)), b(0, static_cast<size_t>(s.K * s.N * e)),
        c(0, static_cast<size_t>(s.M * s.N * e)), ref(0, static_cast<size_t>(s.M * s.N * e)),
        bias(0, static_cast<size_t>(s.N * e));
    fill_random(a, DType::F16);
    fill_random(b, DType::F16);
    fill_random(bias, DType::F16);
    const bool up = std::string(s.what).find("ffn1") != std::string::npos;
    for (Activation act : {Activation::None, Activation::GeluErf}) {
      if (act == Activation::GeluErf && !up) continue;
      auto args = [&](int i, void* out) {
        GemmArgs g;
        g.dtype = DType::F16;
        g.M = s.M, g.N = s.N, g.K = s.K;
        g.trans_b = true;
        g.A = static_cast<char*>(a.data()) + (i % rot) * s.M * s.K * e, g.lda = s.K;
        g.B = b.data(), g.ldb = s.K;
        g.C = out, g.ldc = s.N;
        g.bias = bias.data();
        return g;
      };
      auto cublas = [&](int i, void* out) {
        engine.run(args(i, out), stream.get());
        if (act != Activation::None)
          launch_unary(activation_unary(act), DType::F16, out, out, s.M * s.N, stream.get());
      };
      engine.plan(args(0, ref.data()));
      const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
      const double ms_ref = median_ms(stream, [&](int i) { cublas(i, c.data()); });
      std::printf("  %-16s %-8s cuBLASLt%s %8.4f ms %6.1f TFLOP/s\n", s.what, activation_name(act),
                  act == Activation::None ? "        " : " + unary", ms_ref, flop / (ms_ref * 1e-3) / 1e12);
      bench::json_line("gemm_sm90", str(s.what, " ", activation_name(act), " cublaslt"), ms_ref, "ms");
      cublas(0, ref.data());
      std::vector<uint16_t> want(static_cast<size_t>(s.M * s.N)), got(want.size());
      ref.download(want.data(), want.size() * 2);
      for (Sm90GemmKernel k : kernels) {
        double ms = 0;
        try {
          ms = median_ms(stream, [&](int i) { launch_sm90_gemm(args(i, c.data()), act, stream.get(), k); });
          RLX_CUDA_CHECK(cudaMemset(c.data(), 0xFF, c.size()));
          launch_sm90_gemm(args(0, c.data()), act, stream.get(), k);
          stream.synchronize();
        } catch (const Error& err) {
          std::printf("  %-16s %-8s %-26s failed: %s\n", s.what, activation_name(act), sm90_gemm_kernel_name(k),
                      err.what());
          continue;
        }
        c.download(got.data(), got.size() * 2);
        double worst = 0;
        for (size_t i = 0; i < got.size(); i += 7) {
          const double r = f16_to_f32(want[i]), v = f16_to_f32(got[i]);
          const double d = std::fabs(v - r) / (1.0 + std::fabs(r));
          worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        }
        std::printf("  %-16s %-8s %-26s %8.4f ms %6.1f TFLOP/s %5.2fx  max diff %.2e\n", s.what, activation_name(act),
                    sm90_gemm_kernel_name(k), ms, flop / (ms * 1e-3) / 1e12, ms_ref / ms, worst);
        bench::json_line("gemm_sm90", str(s.what, " ", activation_name(act), " ", sm90_gemm_kernel_name(k)), ms, "ms");
      }
    }
  }
}

// The N = 384 projections followed by a residual LayerNorm (MiniLM's
// attention-out and FFN down): the fused sm90 kernel against what runs
// without it, the cuBLASLt GEMM (bias epilogue) then the residual norm
// kernel; A and R rotated over 4 buffers. Max diff: fused against unfused,
// every 7th element, relative to 1 + |unfused|.
void gemm_ln(GemmEngine& engine, Stream& stream) {
  if (!sm90_gemm_ln_available(0)) {
    std::printf("\nsm90 GEMM + LayerNorm: not available on this device/build; skipped\n");
    return;
  }
  std::printf("\nsm90 GEMM + bias + residual + LayerNorm (f16) vs cuBLASLt GEMM + layer_norm kernel (ms)\n");
  const GemmShape shapes[] = {{32768, 384, 384, "minilm attn-out"}, {32768, 384, 1536, "minilm ffn2"}};
  for (const GemmShape& s : shapes) {
    const int64_t e = 2, rot = 4;
    DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e * rot)), w(0, static_cast<size_t>(s.K * s.N * e)),
        r(0, static_cast<size_t>(s.M * s.N * e * rot)), x(0, static_cast<size_t>(s.M * s.N * e)),
        y(0, static_cast<size_t>(s.M * s.N * e)), y_ref(0, static_cast<size_t>(s.M * s.N * e)),
        bias(0, static_cast<size_t>(s.N * e)), gamma(0, static_cast<size_t>(s.N * e)),
        beta(0, static_cast<size_t>(s.N * e));
    for (DeviceBuffer* b : {&a, &w, &r, &bias, &gamma, &beta}) fill_random(*b, DType::F16);
    auto A = [&](int i) { return static_cast<const char*>(a.data()) + (i % rot) * s.M * s.K * e; };
    auto R = [&](int i) { return static_cast<const char*>(r.data()) + (i % rot) * s.M * s.N * e; };
    auto unfused = [&](int i, void* out) {
      GemmArgs g;
      g.dtype = DType::F16;
      g.M = s.M, g.N = s.N, g.K = s.K;
      g.trans_b = true;
      g.A = A(i), g.lda = s.K;
      g.B = w.data(), g.ldb = s.K;
      g.C = x.data(), g.ldc = s.N;
      g.bias = bias.data();
      engine.run(g, stream.get());
      launch_layer_norm(DType::F16, DType::F16, x.data(), R(i), gamma.data(), beta.data(), out, nullptr, s.M, s.N,
                        1e-12f, stream.get());
    };
    auto fused = [&](int i, void* out) {
      GemmLnArgs g;
      g.dtype = g.param_dtype = DType::F16;
      g.A = A(i), g.W = w.data(), g.bias = bias.data(), g.R = R(i);
      g.gamma = gamma.data(), g.beta = beta.data(), g.Y = out;
      g.M = s.M, g.N = s.N, g.K = s.K, g.eps = 1e-12f;
      launch_sm90_gemm_ln(g, stream.get());
    };
    const double ms_ref = median_ms(stream, [&](int i) { unfused(i, y.data()); });
    const double ms = median_ms(stream, [&](int i) { fused(i, y.data()); });
    unfused(0, y_ref.data());
    RLX_CUDA_CHECK(cudaMemset(y.data(), 0xFF, y.size()));
    fused(0, y.data());
    stream.synchronize();
    std::vector<uint16_t> want(static_cast<size_t>(s.M * s.N)), got(want.size());
    y_ref.download(want.data(), want.size() * 2);
    y.download(got.data(), got.size() * 2);
    double worst = 0;
    for (size_t i = 0; i < got.size(); i += 7) {
      const double rv = f16_to_f32(want[i]), v = f16_to_f32(got[i]);
      const double d = std::fabs(v - rv) / (1.0 + std::fabs(rv));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    // Bytes a perfect fused kernel moves: A, W, R read and Y written once.
    const double bytes = double(e) * (double(s.M) * s.K + double(s.N) * s.K + 2.0 * double(s.M) * s.N);
    std::printf(
        "  %-16s %5lldx%lldx%lld  unfused %8.4f ms   fused %8.4f ms  %5.2fx  (%.0f%% of copy for its bytes)  "
        "max diff %.2e\n",
        s.what, static_cast<long long>(s.M), static_cast<long long>(s.N), static_cast<long long>(s.K), ms_ref, ms,
        ms_ref / ms, 100.0 * bytes / (ms * 1e-3) / (bench::kCopyTBps * 1e12), worst);
    bench::json_line("gemm_ln", str(s.what, " unfused"), ms_ref, "ms");
    bench::json_line("gemm_ln", str(s.what, " fused"), ms, "ms");
  }
}

// LayerNorm folding (Sm90LnFold) at MiniLM's shapes, for the design where
// the residual norms become statistics: attention-out and FFN down as the
// residual fold (C = A·Wᵀ + b + LN(R), C's row partials out; compare the fused
// GEMM + LayerNorm rows above), FFN up and QKV as the row-scale fold (compare
// the ping-pong rows of the sm90 table). A and R rotated over 4 buffers;
// statistics of mean 0 and variance 1.
void ln_fold(Stream& stream) {
  if (!sm90_gemm_fold_available(0)) {
    std::printf("\nsm90 GEMM with a folded LayerNorm: not available on this device/build; skipped\n");
    return;
  }
  std::printf("\nsm90 GEMM with a folded LayerNorm (f16, ms)\n");
  struct FoldShape {
    GemmShape s;
    bool residual;
    Activation act;
  };
  const FoldShape shapes[] = {{{32768, 384, 384, "minilm attn-out"}, true, Activation::None},
                              {{32768, 384, 1536, "minilm ffn2"}, true, Activation::None},
                              {{32768, 1536, 384, "minilm ffn1"}, false, Activation::GeluErf},
                              {{32768, 1152, 384, "minilm qkv"}, false, Activation::None}};
  for (const FoldShape& f : shapes) {
    const GemmShape& s = f.s;
    const int64_t e = 2, rot = 4, parts_a = (s.K + 127) / 128, parts_c = (s.N + 127) / 128;
    DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e * rot)), w(0, static_cast<size_t>(s.K * s.N * e)),
        r(0, static_cast<size_t>(s.M * s.N * e * rot)), c(0, static_cast<size_t>(s.M * s.N * e)),
        bias(0, static_cast<size_t>(s.N * e)), gamma(0, static_cast<size_t>(s.N * e)),
        beta(0, static_cast<size_t>(s.N * e)), stats(0, static_cast<size_t>(s.M * std::max(parts_a, parts_c) * 8)),
        c_stats(0, static_cast<size_t>(s.M * parts_c * 8));
    for (DeviceBuffer* b : {&a, &w, &r, &bias, &gamma, &beta}) fill_random(*b, DType::F16);
    std::vector<float> st(stats.size() / 4);
    for (size_t i = 0; i < st.size(); i += 2) st[i] = 0.0f, st[i + 1] = 128.0f;  // mean 0, M2 over 128 values
    stats.upload(st.data(), stats.size());
    auto run = [&](int i) {
      GemmArgs g;
      g.dtype = DType::F16;
      g.M = s.M, g.N = s.N, g.K = s.K;
      g.trans_b = true;
      g.A = static_cast<const char*>(a.data()) + (i % rot) * s.M * s.K * e, g.lda = s.K;
      g.B = w.data(), g.ldb = s.K;
      g.C = c.data(), g.ldc = s.N;
      g.bias = bias.data();
      Sm90LnFold fold;
      if (f.residual) {
        fold.R = static_cast<const char*>(r.data()) + (i % rot) * s.M * s.N * e, fold.ldr = s.N;
        fold.r_stats = static_cast<const float2*>(stats.data());
        fold.gamma = gamma.data(), fold.beta = beta.data();
        fold.c_stats = static_cast<float2*>(c_stats.data());
      } else {
        fold.a_stats = static_cast<const float2*>(stats.data());
      }
      launch_sm90_gemm_fold(g, f.act, fold, stream.get());
    };
    double ms = 0;
    try {
      ms = median_ms(stream, run);
    } catch (const Error& err) {
      std::printf("  %-16s failed: %s\n", s.what, err.what());
      continue;
    }
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
    const std::string form = f.residual ? "residual + LN(R), stats out" : str("row scale, ", activation_name(f.act));
    std::printf("  %-16s %-30s %8.4f ms %6.1f TFLOP/s\n", s.what, form.c_str(), ms, flop / (ms * 1e-3) / 1e12);
    bench::json_line("gemm_ln_fold", str(s.what, f.residual ? " residual" : " row-scale"), ms, "ms");
  }
}

// FP8 (ScaledMatMul as the CUDA backend runs it: cuBLASLt's fp8 GEMM, e4m3 x
// e4m3, f32 scales applied by the GEMM, bf16 result), per-tensor and per-row
// scales, A rotated as above, beside the fp8 limit; then the whole fp8 linear
// layer (bf16 x quantized per row, then the GEMM) beside the bf16 GEMM. Peer:
// gemm_torch.py's torch._scaled_mm rows.
template <size_t N>
void fp8_gemms(GemmEngine& engine, Stream& stream, const GemmShape (&shapes)[N]) {
  std::printf("\nfp8 GEMM (e4m3 x e4m3 -> bf16, f32 scales; fp8 limit %.0f TFLOP/s, cuBLAS 8192^3, measured)\n",
              bench::kGemmFp8Tflops);
  for (const GemmShape& s : shapes)
    for (bool rows : {false, true}) {
      const int rot = s.M * s.K < (256 << 20) ? 4 : 1;
      DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * rot)), b(0, static_cast<size_t>(s.K * s.N)),
          c(0, static_cast<size_t>(s.M * s.N * 2)), sa(0, static_cast<size_t>(s.M * 4)),
          sb(0, static_cast<size_t>(s.N * 4));
      fill_uniform(a.data(), a.size(), DType::F8E4M3);
      fill_uniform(b.data(), b.size(), DType::F8E4M3);
      fill_uniform(sa.data(), sa.size(), DType::F32);
      fill_uniform(sb.data(), sb.size(), DType::F32);
      std::vector<GemmArgs> args;
      const std::string key = str("fp8 ", s.M, "x", s.N, "x", s.K, " (", s.what, rows ? ", row scales" : "", ")");
      try {
        for (int r = 0; r < rot; ++r) {
          GemmArgs g;
          g.dtype = DType::BF16, g.a_dtype = g.b_dtype = DType::F8E4M3;
          g.M = s.M, g.N = s.N, g.K = s.K;
          g.trans_b = true;
          g.A = static_cast<char*>(a.data()) + r * s.M * s.K, g.lda = s.K;
          g.B = b.data(), g.ldb = s.K;
          g.C = c.data(), g.ldc = s.N;
          g.scale_a = static_cast<const float*>(sa.data()), g.scale_b = static_cast<const float*>(sb.data());
          g.scale_a_rows = g.scale_b_rows = rows;
          engine.plan(g);
          args.push_back(g);
        }
      } catch (const Error& e) {
        std::printf("%-52s no fp8 GEMM: %s\n", key.c_str(), e.what());
        continue;
      }
      const double med =
          median_ms(stream, [&](int i) { engine.run(args[static_cast<size_t>(i % rot)], stream.get()); });
      const double tflops = 2.0 * double(s.M) * double(s.N) * double(s.K) / (med * 1e-3) / 1e12;
      std::printf("%-52s %9.3f ms %8.1f TFLOP/s (%4.1f%% of the fp8 limit)  [%s]\n", key.c_str(), med, tflops,
                  100.0 * tflops / bench::kGemmFp8Tflops, engine.choice_note(args[0]).c_str());
      bench::json_line("gemm_fp8", key, tflops, "TFLOP/s");
      if (!rows) continue;
      // The fp8 linear layer as a graph runs it: bf16 activations quantized per row (one fused
      // kernel: quantize_fp8), then this GEMM; beside the bf16 GEMM of the same shape.
      DeviceBuffer x(0, static_cast<size_t>(s.M * s.K * 2 * rot)), wb(0, static_cast<size_t>(s.K * s.N * 2));
      fill_random(x, DType::BF16);
      fill_random(wb, DType::BF16);
      auto quant = [&](int i) {
        QuantizeFp8Rows q;
        q.x = static_cast<const char*>(x.data()) + (i % rot) * s.M * s.K * 2, q.x_dtype = DType::BF16;
        q.rows = s.M, q.cols = s.K, q.tiny = 1e-30f, q.largest = 448.0f;
        q.scale = static_cast<float*>(sa.data()), q.q = const_cast<void*>(args[static_cast<size_t>(i % rot)].A);
        launch_quantize_fp8_rows(q, stream.get());
      };
      const double q_ms = median_ms(stream, [&](int i) { quant(i); });
      const double lin_ms = median_ms(stream, [&](int i) {
        quant(i);
        engine.run(args[static_cast<size_t>(i % rot)], stream.get());
      });
      GemmArgs h;
      h.dtype = DType::BF16, h.M = s.M, h.N = s.N, h.K = s.K, h.trans_b = true;
      h.A = x.data(), h.lda = s.K, h.B = wb.data(), h.ldb = s.K, h.C = c.data(), h.ldc = s.N;
      engine.plan(h);
      const double bf16_ms = median_ms(stream, [&](int i) {
        GemmArgs r = h;
        r.A = static_cast<const char*>(x.data()) + (i % rot) * s.M * s.K * 2;
        engine.run(r, stream.get());
      });
      const std::string lkey = str("fp8 linear ", s.M, "x", s.N, "x", s.K, " (", s.what, ", bf16 x quantized per row)");
      std::printf("%-52s %9.3f ms (quantize %.3f ms); bf16 GEMM %.3f ms: %.2fx\n", lkey.c_str(), lin_ms, q_ms,
                  bf16_ms, bf16_ms / lin_ms);
      bench::json_line("gemm_fp8", lkey, lin_ms, "ms");
    }
}

}  // namespace

int main(int argc, char** argv) {
  // --only sm90: just rlx's Hopper kernels against cuBLASLt (for iterating on them);
  // --only ln: just the GEMM + LayerNorm rows (for profilers); --only square:
  // the square shapes' cuBLASLt candidates and the engine's choice; --only fp8: the fp8 rows.
  const char* kUsage =
      "usage: rlx_gemm_bench [--only sm90|ln|square|fp8]\n"
      "cuBLASLt GEMM (cached plans) on square and BERT-layer shapes in f16/bf16, TFLOP/s beside the bf16 limit,\n"
      "the fp8 GEMM (ScaledMatMul) beside the fp8 limit, then rlx's sm90 kernels against cuBLASLt, and the fused\n"
      "GEMM + residual LayerNorm against GEMM then norm (--only sm90: just those; --only ln: just the GEMM +\n"
      "LayerNorm rows; --only square: every cuBLASLt candidate of the square shapes beside the engine's choice;\n"
      "--only fp8: just the fp8 rows); torch peer: bench/gemm_torch.py.\n";
  bool sm90_only = false, ln_only = false;
  const std::string only = argc == 3 && std::string(argv[1]) == "--only" ? argv[2] : "";
  const bool square_only = only == "square", fp8_only = only == "fp8";
  if (only == "sm90" || only == "ln") {
    sm90_only = true;
    ln_only = only == "ln";
  } else if (argc > 1 && !square_only && !fp8_only) {
    const bool help = std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help";
    std::fputs(kUsage, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  if (device_count() == 0) {
    std::printf("gemm_bench: no CUDA device; skipped\n");
    return 0;
  }
  GemmEngine engine(0);
  Stream stream;
  const GemmShape shapes[] = {{8192, 8192, 8192, "square"},      {4096, 4096, 4096, "square"},
                          {32768, 1152, 384, "minilm qkv"},  {32768, 1536, 384, "minilm ffn1"},
                          {32768, 384, 1536, "minilm ffn2"}, {32768, 384, 384, "minilm attn-out"},
                          {32768, 2304, 768, "bert-base qkv"}, {32768, 768, 768, "bert-base attn-out"},
                          {32768, 3072, 768, "bert-base ffn1"}, {32768, 768, 3072, "bert-base ffn2"}};
  std::printf("hardware limit: bf16 GEMM %.0f TFLOP/s (cuBLAS 8192^3, measured)\n", bench::kGemmBf16Tflops);
  if (square_only) {
    square_candidates(engine, stream, shapes);
    return 0;
  }
  if (fp8_only) {
    fp8_gemms(engine, stream, shapes);
    return 0;
  }
  for (DType t : sm90_only ? std::vector<DType>{} : std::vector<DType>{DType::BF16, DType::F16}) {
    for (const GemmShape& s : shapes) {
      const int64_t e = 2;
      const int rot = s.M * s.K * e < (256 << 20) ? 4 : 1;  // rotate A when small enough to cache
      DeviceBuffer a(0, static_cast<size_t>(s.M * s.K * e * rot)), b(0, static_cast<size_t>(s.K * s.N * e)),
          c(0, static_cast<size_t>(s.M * s.N * e));
      fill_random(a, t);
      fill_random(b, t);
      std::vector<GemmArgs> args;
      for (int r = 0; r < rot; ++r) {
        GemmArgs g;
        g.dtype = t;
        g.M = s.M;
        g.N = s.N;
        g.K = s.K;
        g.trans_b = true;  // weights stored [N, K] as in the models
        g.A = static_cast<char*>(a.data()) + r * s.M * s.K * e;
        g.lda = s.K;
        g.B = b.data();
        g.ldb = s.K;
        g.C = c.data();
        g.ldc = s.N;
        engine.plan(g);
        args.push_back(g);
      }
      const double med = median_ms(stream, [&](int i) { engine.run(args[static_cast<size_t>(i % rot)], stream.get()); });
      const double tflops = 2.0 * double(s.M) * double(s.N) * double(s.K) / (med * 1e-3) / 1e12;
      const std::string key = str(dtype_name(t), " ", s.M, "x", s.N, "x", s.K, " (", s.what, ")");
      std::printf("%-42s %9.3f ms %8.1f TFLOP/s (%4.1f%% of bf16 peak)\n", key.c_str(), med, tflops,
                  100.0 * tflops / bench::kGemmBf16Tflops);
      bench::json_line("gemm", key, tflops, "TFLOP/s");
    }
  }
  if (!sm90_only) fp8_gemms(engine, stream, shapes);
  if (!ln_only) sm90_kernels(engine, stream, shapes);
  ln_fold(stream);
  gemm_ln(engine, stream);
  if (!sm90_only) candidates(engine, stream, shapes);
  return 0;
}
