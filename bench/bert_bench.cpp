// End-to-end BERT-shaped encoder on the CUDA backend, random weights:
// all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads, FFN 1536) and
// BERT-base (12 layers, 768, 12, 3072), fp16, at batch 1×16 and 256×128
// tokens. Times Executable::run() (inputs copied in, pooled output copied
// out, one sync) with CUDA graphs on and off, and with graphs runs queued
// back to back (the host's part of each run behind the device's); median of
// many runs. PyTorch's figures for the same shapes come from
// bench/bert_torch.py in the same run.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "rlx/core/env.h"
#include "rlx/core/log.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

using namespace rlx;

namespace {

Tensor random_tensor(const std::vector<int64_t>& shape, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

double time_run(Executable& exe, const std::vector<Tensor>& in, int iters) {
  for (int i = 0; i < 10; ++i) exe.run(in);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    exe.run(in);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(ms);
}

// Runs back to back with the backend's queue full (Executable::launch): the
// host stages run i + 1 and reads back run i − 1 while the device runs run i,
// as `rlx embed` does over a stretch of batches of one shape. Per-run time:
// the median over five rounds of `iters` runs each.
double time_queued(Executable& exe, const std::vector<Tensor>& in, int iters) {
  const size_t depth = exe.queue_depth();
  std::vector<double> ms;
  for (int round = 0; round < 6; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (exe.queued() == depth) exe.finish();
      exe.launch(in);
    }
    while (exe.queued() > 0) exe.finish();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
    if (round > 0) ms.push_back(took.count() / iters);  // round 0 captures the queue's graphs
  }
  return bench::median(ms);
}

// Optional filters (for profilers): --model minilm-l6|bert-base, --shape BxL (1x16 and 256x128 by
// default; any other batch x length runs alone), --graphs-only.
struct Filter {
  std::string model;
  int64_t B = 0, L = 0;  // 0: the default shapes
  bool graphs_only = false;
};
Filter g_filter;

void run_model(const char* label, bert::BertConfig cfg, const std::string& device) {
  if (!g_filter.model.empty() && g_filter.model != label) return;
  cfg.pooling = bert::Pooling::Mean;
  cfg.normalize = true;
  std::mt19937 rng(42);
  Graph g = bert::build_graph(cfg);
  for (bool graphs : {true, false}) {
    if (!graphs && g_filter.graphs_only) continue;
    Session s(device);
    CompileOptions o;
    o.precision = DType::F16;
    o.cuda_graphs = graphs;
    auto exe = s.compile(g, o);
    for (NodeId id : exe->graph().leaves(OpKind::Param)) {
      const auto& n = exe->graph().node(id);
      const auto dims = static_dims(n.type.shape);
      const bool is_ln = n.name.find("LayerNorm.weight") != std::string::npos;
      Tensor t = random_tensor(dims, dims.size() == 1 ? 0.02f : 0.05f, rng);
      if (is_ln)
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 1.0f;
      exe->set_param(n.attr<LeafAttrs>().name, t);
    }
    std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 16}, {256, 128}};
    if (g_filter.B > 0) shapes = {{g_filter.B, g_filter.L}};
    for (auto [B, L] : shapes) {
      std::uniform_int_distribution<int32_t> tok(1000, static_cast<int32_t>(cfg.vocab_size) - 1);
      Tensor ids = Tensor::empty(DType::I32, {B, L}), types = Tensor::zeros(DType::I32, {B, L});
      Tensor mask = Tensor::empty(DType::I32, {B, L}), pos = Tensor::empty(DType::I32, {L});
      for (int64_t i = 0; i < B * L; ++i) {
        ids.data<int32_t>()[i] = tok(rng);
        mask.data<int32_t>()[i] = 1;
      }
      for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
      const double ms = time_run(*exe, {ids, types, mask, pos}, B == 1 ? 200 : 50);
      const std::string key = str(label, " ", B, "x", L);
      std::printf("%-28s %-14s %9.3f ms  %10.0f sentences/s\n", key.c_str(), graphs ? "cuda-graphs" : "no-graphs", ms,
                  static_cast<double>(B) / ms * 1000.0);
      bench::json_line("bert", key, ms, "ms", graphs ? "rlx" : "rlx-no-graphs");
      // With RLX_DISPATCH_REPORT=1 the program timed each thunk on its first run.
      if (env_bool("RLX_DISPATCH_REPORT") && graphs) std::printf("%s", exe->dispatch_report().c_str());
      if (graphs && exe->can_queue()) {
        const double q = time_queued(*exe, {ids, types, mask, pos}, B == 1 ? 200 : 50);
        std::printf("%-28s %-14s %9.3f ms  %10.0f sentences/s  (runs queued back to back)\n", key.c_str(),
                    "queued", q, static_cast<double>(B) / q * 1000.0);
        bench::json_line("bert", key, q, "ms", "rlx-queued");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) g_filter.model = argv[++i];
    else if (a == "--shape" && i + 1 < argc) {
      long long b = 0, l = 0;
      char extra = 0;
      if (std::sscanf(argv[++i], "%lldx%lld%c", &b, &l, &extra) != 2 || b < 1 || l < 1 || l > 512) {
        std::fprintf(stderr, "rlx_bert_bench: --shape %s: expected BATCHxLENGTH, length 1-512 (e.g. 256x128)\n",
                     argv[i]);
        return 2;
      }
      g_filter.B = b;
      g_filter.L = l;
    }
    else if (a == "--graphs-only") g_filter.graphs_only = true;
    else {
      const bool help = a == "-h" || a == "--help";
      std::fprintf(help ? stdout : stderr,
                   "usage: rlx_bert_bench [--model minilm-l6|bert-base] [--shape BxL] [--graphs-only]\n"
                   "BERT-shaped encoders (random weights, fp16, end to end through Executable::run) with and without "
                   "CUDA graphs; torch peer: bench/bert_torch.py.\n");
      return help ? 0 : 2;
    }
  }
  register_builtin_backends();
  if (!backend_available("cuda")) {
    std::printf("bert_bench: no CUDA device; skipped\n");
    return 0;
  }
  bert::BertConfig mini;
  mini.hidden = 384;
  mini.layers = 6;
  mini.heads = 12;
  mini.intermediate = 1536;
  bert::BertConfig base;  // defaults are BERT-base
  std::printf("peers on this H200 (measured): PyTorch eager fp16 MiniLM 1x16 2.32 ms, 256x128 3.30 ms; "
              "torch.compile 1.43 / 2.91 ms; BERT-base 256x128 14.1 ms\n");
  run_model("minilm-l6", mini, "cuda");
  run_model("bert-base", base, "cuda");
  return 0;
}
