#include "rlx/backends/cuda/cuda_backend.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/kernels/io_stage.h"
#include "rlx/backends/cuda/kernels/splat.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/memory.h"
#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/log.h"
#include "rlx/passes/memory_plan.h"
#include "rlx/runtime/cost_model.h"

namespace rlx::cuda {
namespace {

// What programs of one backend share: the device, one stream (programs run
// one at a time on it, so scratch and the cuBLASLt workspace are never shared
// by work in flight), the GEMM plan cache, and the cost model (calibrated
// per RLX_CALIBRATE, else the built-in heuristic) that picks GEMM algorithms
// and predicts the dispatch report's times.
struct DeviceContext {
  int index;
  const DeviceProps& props;
  Stream stream;
  GemmEngine gemm;
  std::mutex run_mu;
  CostModel cost;
  explicit DeviceContext(int i)
      : index(i), props(device_props(i)), stream(), gemm(i), cost(model_for(i, device_calibration(i))) {
    if (const Calibration* c = cost.calibration()) gemm.set_algo_chooser(gemm_chooser(*c));
  }

 private:
  static CostModel model_for(int i, const std::optional<Calibration>& c) {
    if (!c) return CostModel(heuristic_gpu_rates());
    return CostModel(gpu_rates_from(*c, str("cuda:", i)), *c);
  }
};

// The backend-agnostic plan, plus the Narrows attention reads in place and
// the residual LayerNorms fused into the projection before them
// (gemm_ln_fuses: their output is written into the projection's block) as
// views, and the inputs of a fused pooling tail (pool_norm_reads), embedding
// lookup (gather_scale_reads), projection + attention (qkv_attention_reads), a
// cast folded into the attention or rope launch before it (attention_cast_reads),
// FFN (ffn_ln_reads) or fp8 quantization (fp8_quant_reads) kept live until its last node. Where persistent
// segments may form, a program whose intermediates add up to at most
// kNoReuseBytes (a decode step: rows of one token) gives every tensor its
// own block: the persistent kernel runs the ops of several nodes between two
// grid barriers, and a block reused within that stretch would be written by
// one CTA while another still reads it (a barrier per reuse).
constexpr int64_t kNoReuseBytes = int64_t{64} << 20;
MemoryPlan plan_cuda_memory(const Graph& g, int device) {
  const auto users = g.users();
  ExtraViews extra;
  extra.is_view = [&](NodeId id) {
    return narrow_folds_into_attention(g, users, id) || gemm_ln_fuses(g, users, id, device);
  };
  extra.offset = [&](NodeId id) -> int64_t {
    const Node& n = g.node(id);
    if (n.op != OpKind::Narrow) return 0;  // a fused norm: the whole block
    return n.attr<NarrowAttrs>().start * dtype_size(n.type.dtype);
  };
  extra.also_reads = [&](NodeId id) {
    std::vector<NodeId> reads = pool_norm_reads(g, users, id);
    for (NodeId r : gather_scale_reads(g, users, id)) reads.push_back(r);
    for (NodeId r : qkv_attention_reads(g, users, id, device)) reads.push_back(r);
    for (NodeId r : attention_cast_reads(g, users, id)) reads.push_back(r);
    for (NodeId r : ffn_ln_reads(g, users, id, device)) reads.push_back(r);
    for (NodeId r : fp8_quant_reads(g, users, id)) reads.push_back(r);
    return reads;
  };
  MemoryPlan plan = plan_memory(g, 256, extra);
  if (persistent_enabled() && plan.unplanned_bytes <= kNoReuseBytes) plan = plan_memory(g, 256, extra, false);
  return plan;
}

// Runs of one program that may be queued at once.
constexpr size_t kQueueDepth = 2;

class CudaProgram final : public Program {
 public:
  CudaProgram(const Graph& g, const CompileOptions& opts, const BoundBuffers& buffers, DeviceContext& dc)
      : graph_(g), dc_(dc), plan_(plan_cuda_memory(g, dc.index)),
        encoder_(opts.cuda_graphs, [this](NodeId id) { return graph_.describe(id); }) {
    DeviceGuard guard(dc.index);
    if (verbose()) std::cerr << plan_.to_string(graph_);
    arena_ = std::make_unique<DeviceBuffer>(dc.index, static_cast<size_t>(plan_.arena_bytes), "activation arena");

    // Constants go in one buffer of their own, uploaded once.
    size_t const_bytes = 0;
    std::vector<size_t> const_off(static_cast<size_t>(g.size()), 0);
    for (NodeId i = 0; i < g.size(); ++i) {
      if (g.node(i).op != OpKind::Constant) continue;
      const_off[static_cast<size_t>(i)] = const_bytes;
      const_bytes += (plan_.slots[static_cast<size_t>(i)].bytes + 255) / 256 * 256;
    }
    if (const_bytes) {
      constants_ = std::make_unique<DeviceBuffer>(dc.index, const_bytes, "constants");
      for (NodeId i = 0; i < g.size(); ++i)
        if (g.node(i).op == OpKind::Constant) {
          const Tensor& v = g.node(i).attr<ConstantAttrs>().value;
          constants_->upload(v.raw(), v.nbytes(), const_off[static_cast<size_t>(i)]);
        }
    }

    // Inputs, then room for the error flags (at most one per node), then the
    // outputs live in one device block. One copy from pinned staging fills
    // the inputs each run (the staging's flag words stay zero, so the same
    // copy clears the flags); one copy back brings the flags and the outputs:
    // two copies instead of one per input, a memset, a flag read and a copy
    // per output. (Outputs that are views or leaves keep a copy each.) Queued
    // runs (launch) copy by kernels in their own graphs instead (io_stage.h).
    std::vector<size_t> in_off(static_cast<size_t>(g.size()), 0);
    size_t in_bytes = 0;
    for (NodeId id : g.leaves(OpKind::Input)) {
      inputs_.push_back({id, in_bytes, static_cast<size_t>(plan_.slots[static_cast<size_t>(id)].bytes)});
      in_off[static_cast<size_t>(id)] = in_bytes;
      in_bytes += (inputs_.back().bytes + 255) / 256 * 256;
    }
    const size_t flag_bytes = (static_cast<size_t>(g.size()) * sizeof(int32_t) + 255) / 256 * 256;
    // An output the memory plan gave a block of its own is computed straight
    // into this block, at back_off past the flags, the same offset as in the
    // pinned buffer it is copied to.
    constexpr size_t kNone = SIZE_MAX;
    std::vector<size_t> back_off(static_cast<size_t>(g.size()), kNone);
    size_t back_bytes = flag_bytes;
    for (const auto& [_, id] : g.outputs()) {
      const auto& slot = plan_.slots[static_cast<size_t>(id)];
      const bool own_block = g.node(id).op != OpKind::Input && slot.placement == Placement::Arena;
      if (!own_block || back_off[static_cast<size_t>(id)] != kNone) continue;
      back_off[static_cast<size_t>(id)] = back_bytes;
      back_bytes += (static_cast<size_t>(slot.bytes) + 255) / 256 * 256;
    }
    const size_t copied_back = back_bytes;  // flags and the outputs computed in place
    io_ = std::make_unique<DeviceBuffer>(dc.index, in_bytes + back_bytes, "inputs, error flags and outputs");
    RLX_CUDA_CHECK(cudaMemset(io_->data(), 0, in_bytes + back_bytes));  // flag words no kernel of this program sets
    settle_default_stream();
    in_stage_ = std::make_unique<PinnedBuffer>(in_bytes + flag_bytes);
    std::memset(in_stage_->data(), 0, in_bytes + flag_bytes);

    std::vector<void*> ptrs(static_cast<size_t>(g.size()), nullptr);
    char* io_back = static_cast<char*>(io_->data()) + in_bytes;
    for (NodeId i = 0; i < g.size(); ++i) {
      const Node& n = g.node(i);
      const auto& slot = plan_.slots[static_cast<size_t>(i)];
      char* p = nullptr;
      if (n.op == OpKind::Input) {
        ptrs[static_cast<size_t>(i)] = static_cast<char*>(io_->data()) + in_off[static_cast<size_t>(i)];
        continue;
      }
      switch (slot.placement) {
        case Placement::Arena:
          p = back_off[static_cast<size_t>(i)] != kNone ? io_back + back_off[static_cast<size_t>(i)]
                                                        : static_cast<char*>(arena_->data()) + slot.offset;
          break;
        case Placement::Param: p = static_cast<char*>(buffers.params.at(n.attr<LeafAttrs>().name)->data()); break;
        case Placement::State: p = static_cast<char*>(buffers.states.at(n.attr<LeafAttrs>().name)->data()); break;
        case Placement::Constant: p = static_cast<char*>(constants_->data()) + const_off[static_cast<size_t>(i)]; break;
        case Placement::View: p = static_cast<char*>(ptrs[static_cast<size_t>(slot.root)]) + slot.offset; break;
      }
      ptrs[static_cast<size_t>(i)] = p;
    }

    // Outputs travel back through pinned staging, copied inside the graph:
    // the in-place ones with the flags, the rest after them one by one.
    std::vector<IoSlot> copied_alone;
    for (const auto& [_, id] : g.outputs()) {
      const size_t bytes = static_cast<size_t>(plan_.slots[static_cast<size_t>(id)].bytes);
      if (back_off[static_cast<size_t>(id)] != kNone) {
        outputs_.push_back({id, back_off[static_cast<size_t>(id)], bytes, io_back + back_off[static_cast<size_t>(id)]});
        continue;
      }
      outputs_.push_back({id, back_bytes, bytes, ptrs[static_cast<size_t>(id)]});
      copied_alone.push_back(outputs_.back());
      back_bytes += (bytes + 63) / 64 * 64;
    }
    back_stage_ = std::make_shared<PinnedBuffer>(back_bytes);

    LowerCtx ctx(g, dc.props, opts, dc.gemm, ptrs, schedule_, &workspace_ptr_);
    lower_pool_norms(ctx);  // absorbs its patterns' nodes before they come up below
    lower_fp8_quants(ctx);  // the same for quantize_fp8's chains
    for (NodeId i = 0; i < g.size(); ++i) {
      const Node& n = g.node(i);
      if (!n.is_leaf() && !ctx.absorbed(i)) {
        const KernelEntry* k = KernelRegistry::global().find(kCudaBackend, g, i);
        if (!k) throw Unsupported(str("cuda: ", g.describe(i), ": no kernel for ",
                                      signature_to_string(KernelRegistry::signature(g, i))));
        const size_t before = schedule_.thunks.size();
        std::any_cast<const CudaLowering&>(k->impl)(ctx, i);
        for (size_t t = before; t < schedule_.thunks.size(); ++t)
          if (schedule_.thunks[t].kernel.empty()) schedule_.thunks[t].kernel = k->description;
      }
      ctx.flush_at(i);
    }
    RLX_CHECK(ctx.deferred_empty(), "cuda: a fused launch was scheduled after a node the program does not have");
    // Runs of decode ops become one persistent-kernel launch (persistent.h).
    if (persistent_enabled())
      segments_ = fuse_persistent_segments(schedule_, dc.index, [&](NodeId id) { return ctx.error_flag(id); });
    // Error flags of data-dependent kernels: zeroed before, read back after.
    flag_nodes_ = ctx.flag_nodes();
    RLX_CHECK(flag_nodes_.size() <= static_cast<size_t>(g.size()), "cuda: more error flags than nodes");
    const size_t fbytes = flag_nodes_.size() * sizeof(int32_t);
    if (fbytes) {
      ctx.bind_flags(reinterpret_cast<int32_t*>(io_back));
      flag_slots_ = ctx.take_flag_slots();
    }
    in_bytes_ = in_bytes;
    in_copy_bytes_ = in_bytes + fbytes;
    if (const size_t bytes = in_copy_bytes_) {
      void* dst = io_->data();
      const void* src = in_stage_->data();
      schedule_.thunks.insert(schedule_.thunks.begin(),
                              Thunk{-1, fbytes ? "copy inputs host->device (and zeroed error flags)" : "copy inputs host->device",
                                    [=](cudaStream_t s) {
                                      RLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
                                    }});
      body_begin_ = 1;
    }
    if (const size_t n = ctx.counter_ints()) {
      counters_ = std::make_unique<DeviceBuffer>(dc.index, n * sizeof(int32_t), "grid counters");
      RLX_CUDA_CHECK(cudaMemset(counters_->data(), 0, n * sizeof(int32_t)));
      settle_default_stream();
      ctx.bind_counters(static_cast<int32_t*>(counters_->data()));
      counter_slots_ = ctx.take_counter_slots();
    }
    if (const size_t n = ctx.persistent_bytes()) {
      persistent_ = std::make_unique<DeviceBuffer>(dc.index, n, "persistent scratch");
      ctx.bind_persistent(persistent_->data());
      persistent_slots_ = ctx.take_persistent_slots();
    }
    schedule_.end_segment();
    // The copy back goes into the run's output block (take_back_block), so
    // it is launched after the graphs, not captured in them.
    char* const* target = &back_target_;
    auto copy_back = [&](NodeId node, const char* what, const void* src, size_t offset, size_t bytes) {
      back_copies_.add(Thunk{node, what, [=](cudaStream_t s) {
                               RLX_CUDA_CHECK(cudaMemcpyAsync(*target + offset, src, bytes, cudaMemcpyDeviceToHost, s));
                             }});
      out_copies_.push_back({src, offset, bytes});
    };
    const size_t from = fbytes ? 0 : flag_bytes;  // the flag words only when there are flags
    if (copied_back > from)
      copy_back(-1, fbytes ? "copy error flags and outputs device->host" : "copy outputs device->host", io_back + from,
                from, copied_back - from);
    for (const auto& io : copied_alone)
      copy_back(io.node, "copy output device->host", ptrs[static_cast<size_t>(io.node)], io.offset, io.bytes);
    back_copies_.end_segment();
    if (ctx.workspace_bytes()) {
      workspace_ = std::make_unique<DeviceBuffer>(dc.index, ctx.workspace_bytes(), "kernel workspace");
      workspace_ptr_ = workspace_->data();
    }
    for (auto& seg : segments_) seg->finalize();  // every flag is bound by now
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    std::lock_guard lock(dc_.run_mu);
    DeviceGuard guard(dc_.index);
    RLX_CHECK(pending_.empty(), "cuda: run: ", pending_.size(), " queued run(s) are not finished");
    const bool report = env_bool("RLX_DISPATCH_REPORT");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    stage_inputs(static_cast<char*>(in_stage_->data()), inputs, {});
    if (report && !run_events_[0]) {
      run_events_[0] = std::make_unique<Event>();
      run_events_[1] = std::make_unique<Event>();
    }
    const auto t1 = Clock::now();
    const std::shared_ptr<PinnedBuffer> back = take_back_block();
    back_target_ = static_cast<char*>(back->data());
    if (report) run_events_[0]->record(dc_.stream.get());
    encoder_.run(schedule_, dc_.stream.get());
    encoder_.run_direct(back_copies_, dc_.stream.get());
    if (report) run_events_[1]->record(dc_.stream.get());
    const auto t2 = Clock::now();
    dc_.stream.synchronize();
    const auto t3 = Clock::now();
    check_flags(back_target_);
    if (report && times_ms_.empty()) time_thunks();
    std::vector<Tensor> outs;
    for (const auto& io : outputs_) {
      const TensorType& t = graph_.node(io.node).type;
      if (back != back_stage_) {  // the block is the run's own: its tensors share it
        outs.push_back(Tensor::adopt(t.dtype, static_dims(t.shape), back_target_ + io.offset,
                                     std::shared_ptr<void>(back, back_target_ + io.offset)));
        continue;
      }
      outs.push_back(copy_output(io, back_target_));
    }
    if (report) {
      auto us = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::micro>(b - a).count();
      };
      phases_ = {us(t0, t1), us(t1, t2), 1e3 * run_events_[1]->elapsed_ms_since(*run_events_[0]), us(t2, t3),
                 us(t3, Clock::now()), true};
    }
    return outs;
  }

  void launch(const std::vector<Tensor>& inputs, const std::vector<Feed>& feeds) override {
    std::lock_guard lock(dc_.run_mu);
    DeviceGuard guard(dc_.index);
    RLX_CHECK(pending_.size() < kQueueDepth, "cuda: at most ", kQueueDepth,
              " runs of a program can be queued; finish() one first");
    const char* io_begin = static_cast<const char*>(io_->data());
    for (const Feed& f : feeds) {
      RLX_CHECK(f.input < inputs_.size() && f.output < outputs_.size(), "cuda: launch: feed ", f.input, " <- ",
                f.output, " is out of range");
      const IoSlot& in = inputs_[f.input];
      const IoSlot& out = outputs_[f.output];
      RLX_CHECK(in.bytes == out.bytes, "cuda: launch: ", graph_.describe(in.node), " (", in.bytes,
                " bytes) cannot be fed from ", graph_.describe(out.node), " (", out.bytes, " bytes)");
      const auto* o = static_cast<const char*>(out.dev);
      if (o >= io_begin && o < io_begin + in_bytes_)
        throw Unsupported(str("cuda: launch: ", graph_.describe(out.node),
                              " is a graph input; a fed input takes a computed output"));
    }
    RLX_CHECK(feeds.size() <= static_cast<size_t>(kMaxIoFeeds), "cuda: launch: ", feeds.size(),
              " fed inputs, at most ", kMaxIoFeeds);
    QueueSlot& slot = queue_slot(next_slot_);
    auto* header = static_cast<IoStageHeader*>(slot.in->data());
    header->feeds = static_cast<uint32_t>(feeds.size());
    for (size_t i = 0; i < feeds.size(); ++i)
      header->feed[i] = {outputs_[feeds[i].output].dev, static_cast<uint32_t>(inputs_[feeds[i].input].offset),
                         static_cast<uint32_t>(inputs_[feeds[i].input].bytes)};
    stage_inputs(static_cast<char*>(slot.in->data()) + kIoStageHeaderBytes, inputs, feeds);
    cudaStream_t s = dc_.stream.get();
    slot.encoder->run(slot.schedule, s);
    slot.done.record(s);
    pending_.push_back(next_slot_);
    next_slot_ = (next_slot_ + 1) % kQueueDepth;
  }

  std::vector<Tensor> finish() override {
    std::lock_guard lock(dc_.run_mu);
    DeviceGuard guard(dc_.index);
    RLX_CHECK(!pending_.empty(), "cuda: finish: no run is queued");
    const QueueSlot& slot = *ring_[pending_.front()];
    pending_.pop_front();
    slot.done.synchronize();
    const char* back = static_cast<const char*>(slot.back->data());
    check_flags(back);
    std::vector<Tensor> outs;
    for (const auto& io : outputs_) outs.push_back(copy_output(io, back));
    return outs;
  }

  ~CudaProgram() override {
    if (pending_.empty()) return;
    try {  // queued work still writes this program's buffers
      dc_.stream.synchronize();
    } catch (const std::exception& e) {
      log_warn("cuda: a queued run failed while its program was destroyed: ", e.what());
    }
  }

  std::string dispatch_report() const override {
    std::ostringstream os;
    os << "dispatch report (cuda:" << dc_.index << " " << dc_.props.name << ", " << schedule_.thunks.size()
       << " thunks, arena " << plan_.arena_bytes << " bytes, cuda graphs "
       << (encoder_.uses_graphs() ? "on" : "off") << ", persistent segments "
       << (persistent_disabled_reason() ? str("off: ", persistent_disabled_reason()) : "on") << "):\n";
    // Where a run's wall time goes (the last run with RLX_DISPATCH_REPORT set): host work around the
    // device's, which a peer timed with CUDA events alone does not count.
    if (phases_.valid)
      os << "  last run: inputs staged " << phases_.stage_in_us << " us, launched in " << phases_.launch_us
         << " us, on the device " << phases_.device_us << " us (events around the launch), waited "
         << phases_.wait_us << " us after launching, outputs copied out " << phases_.copy_out_us << " us\n";
    os << "  cost model: " << (dc_.cost.rates().calibrated ? "calibrated" : "heuristic (no calibration)")
       << "; per node: predicted vs measured (the node's thunks summed)\n";
    // Thunks are timed only on a run with RLX_DISPATCH_REPORT set; a node none
    // of whose thunks was timed says so instead of showing 0.
    std::vector<double> node_us(static_cast<size_t>(graph_.size()), 0.0);
    std::vector<bool> node_timed(static_cast<size_t>(graph_.size()), false);
    for (size_t t = 0; t < schedule_.thunks.size() && t < times_ms_.size(); ++t)
      if (schedule_.thunks[t].node >= 0) {
        node_us[static_cast<size_t>(schedule_.thunks[t].node)] += times_ms_[t] * 1e3;
        node_timed[static_cast<size_t>(schedule_.thunks[t].node)] = true;
      }
    for (size_t t = 0; t < schedule_.thunks.size(); ++t) {
      const Thunk& th = schedule_.thunks[t];
      os << "  " << (th.node >= 0 ? graph_.describe(th.node) : std::string("program")) << " -> " << th.kernel;
      if (th.persistent) os << " [could run in the persistent kernel]";
      if (t < times_ms_.size()) os << "  " << times_ms_[t] * 1000.0f << " us";
      // The node's prediction, once, on its last thunk.
      const bool last_of_node = th.node >= 0 && (t + 1 == schedule_.thunks.size() || schedule_.thunks[t + 1].node != th.node);
      if (last_of_node && !graph_.node(th.node).is_leaf()) {
        os << "  [node predicted " << dc_.cost.predict_node(graph_, th.node).value << " us, ";
        if (node_timed[static_cast<size_t>(th.node)]) os << "measured " << node_us[static_cast<size_t>(th.node)] << " us]";
        else os << "not measured (thunks are timed on a run with RLX_DISPATCH_REPORT=1)]";
      }
      os << "\n";
    }
    for (const Thunk& th : back_copies_.thunks)
      os << "  " << (th.node >= 0 ? graph_.describe(th.node) : std::string("program")) << " -> " << th.kernel
         << " (launched after the graphs, into the run's output block)\n";
    return os.str();
  }

 private:
  struct IoSlot {
    NodeId node;
    size_t offset, bytes;
    const void* dev = nullptr;  // outputs: where the run leaves the value on the device
  };

  // Queued runs (kQueueDepth): each has its own staging for the inputs and the
  // copy back, so the host can stage the next run while the device runs this one.
  struct QueueSlot {
    std::unique_ptr<PinnedBuffer> in, back;  // header + inputs; flags + outputs
    ThunkSchedule schedule;                  // in-copy, the program's thunks, out-copy
    std::unique_ptr<Encoder> encoder;        // its graphs
    Event done{false};
  };

  static bool fed(const std::vector<Feed>& feeds, size_t input) {
    for (const Feed& f : feeds)
      if (f.input == input) return true;
    return false;
  }

  void stage_inputs(char* host, const std::vector<Tensor>& inputs, const std::vector<Feed>& feeds) const {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs_[i].bytes && !fed(feeds, i)) std::memcpy(host + inputs_[i].offset, inputs[i].raw(), inputs_[i].bytes);
  }

  // Ring slot i, made on first use: its pinned staging and its own graphs,
  // which copy the inputs in (feeds included) and the flags and outputs out
  // by kernels around the program's kernels: one graph per run.
  QueueSlot& queue_slot(size_t i) {
    if (ring_.empty()) ring_.resize(kQueueDepth);
    std::unique_ptr<QueueSlot>& slot = ring_[i];
    if (slot) return *slot;
    if (!out_copies_dev_ && !out_copies_.empty()) {
      out_copies_dev_ = std::make_unique<DeviceBuffer>(dc_.index, out_copies_.size() * sizeof(IoOutCopy),
                                                       "queued runs' output copies");
      out_copies_dev_->upload(out_copies_.data(), out_copies_.size() * sizeof(IoOutCopy));
    }
    auto q = std::make_unique<QueueSlot>();
    const size_t in_vec_bytes = (in_copy_bytes_ + 15) / 16 * 16;  // within the flag words' 256-byte block
    q->in = std::make_unique<PinnedBuffer>(kIoStageHeaderBytes + in_stage_->size());
    std::memset(q->in->data(), 0, q->in->size());  // the flag words stay zero
    q->back = std::make_unique<PinnedBuffer>(back_stage_->size());
    q->encoder = std::make_unique<Encoder>(encoder_.uses_graphs(), [this](NodeId id) { return graph_.describe(id); });
    const void* stage = q->in->data();
    void* dst = io_->data();
    if (in_vec_bytes)
      q->schedule.add(Thunk{-1, "copy inputs in (kernel; fed inputs from the last run's outputs)",
                            [=](cudaStream_t st) { launch_io_stage_in(stage, dst, in_vec_bytes, st); }});
    const size_t shift = q->schedule.thunks.size();
    for (size_t t = body_begin_; t < schedule_.thunks.size(); ++t) q->schedule.add(schedule_.thunks[t]);
    for (size_t end : schedule_.segment_ends) q->schedule.segment_ends.push_back(end - body_begin_ + shift);
    if (!out_copies_.empty()) {
      const auto* copies = static_cast<const IoOutCopy*>(out_copies_dev_->data());
      const int n = static_cast<int>(out_copies_.size());
      size_t max_bytes = 0;
      for (const IoOutCopy& c : out_copies_) max_bytes = std::max<size_t>(max_bytes, c.bytes);
      void* host = q->back->data();
      q->schedule.add(Thunk{-1, "copy flags and outputs out (kernel)",
                            [=](cudaStream_t st) { launch_io_stage_out(copies, n, max_bytes, host, st); }});
      if (!q->schedule.segment_ends.empty()) q->schedule.segment_ends.back() = q->schedule.thunks.size();
      else q->schedule.end_segment();
    }
    slot = std::move(q);
    return *slot;
  }

  Tensor copy_output(const IoSlot& io, const char* back) const {
    const TensorType& t = graph_.node(io.node).type;
    Tensor o = Tensor::empty(t.dtype, static_dims(t.shape));
    if (io.bytes) std::memcpy(o.raw_mut(), back + io.offset, io.bytes);
    return o;
  }

  // A pinned block for this run's copy back: one of up to kBackBlocks that
  // no tensor of an earlier run holds any more (its outputs are handed out
  // as tensors over it), else the staging block, whose outputs are copied
  // into new tensors. Blocks past kBackBlockBytes are not pooled.
  static constexpr size_t kBackBlocks = 3, kBackBlockBytes = size_t{16} << 20;
  std::shared_ptr<PinnedBuffer> take_back_block() {
    static const bool pooled = env_bool("RLX_CUDA_PINNED_OUTPUTS");
    if (!pooled || outputs_.empty() || back_stage_->size() > kBackBlockBytes) return back_stage_;
    for (const auto& b : back_blocks_)
      if (b.use_count() == 1) {  // only the pool holds it: the caller is done with its tensors
        std::atomic_thread_fence(std::memory_order_acquire);
        return b;
      }
    if (back_blocks_.size() == kBackBlocks) return back_stage_;
    back_blocks_.push_back(std::make_shared<PinnedBuffer>(back_stage_->size()));
    return back_blocks_.back();
  }

  void check_flags(const char* back) const {
    if (flag_nodes_.empty()) return;
    const auto* f = reinterpret_cast<const int32_t*>(back);  // the flags lead the copy back
    for (size_t i = 0; i < flag_nodes_.size(); ++i) {
      if (f[i] == 0) continue;
      if (f[i] & kPersistentTimeout)
        throw DeviceError(str("cuda: ", graph_.describe(flag_nodes_[i]),
                              ": the persistent decode kernel's CTAs were not all resident at once (a grid barrier "
                              "timed out; is another program using the GPU?); results are invalid. Set "
                              "RLX_CUDA_PERSISTENT=0 to run without it"));
      const char* what = f[i] == 1 ? "an index is out of range (those rows were written as zeros)"
                         : f[i] == 2 ? "the write would run past the end of the state (nothing was written)"
                         : f[i] == kSplatBadInput
                             ? "a Gaussian has a non-finite parameter or a zero rotation quaternion, or the camera "
                               "has a non-finite entry or fx, fy <= 0 (the image is invalid)"
                             : "a kernel reported bad input";
      throw InvalidArgument(str("cuda: ", graph_.describe(flag_nodes_[i]), ": ", what));
    }
  }

  // Times each thunk once, launched directly between events (for the report).
  void time_thunks() {
    cudaStream_t s = dc_.stream.get();
    std::vector<std::unique_ptr<Event>> ev;
    for (size_t i = 0; i <= schedule_.thunks.size(); ++i) ev.push_back(std::make_unique<Event>());
    ev[0]->record(s);
    for (size_t i = 0; i < schedule_.thunks.size(); ++i) {
      schedule_.thunks[i].launch(s);
      ev[i + 1]->record(s);
    }
    dc_.stream.synchronize();
    for (size_t i = 0; i < schedule_.thunks.size(); ++i) times_ms_.push_back(ev[i + 1]->elapsed_ms_since(*ev[i]));
  }

  Graph graph_;
  DeviceContext& dc_;
  MemoryPlan plan_;
  std::unique_ptr<DeviceBuffer> arena_, constants_, workspace_, io_, counters_, persistent_;
  std::vector<NodeId> flag_nodes_;
  std::vector<std::unique_ptr<int32_t*>> flag_slots_, counter_slots_;
  std::vector<std::unique_ptr<void*>> persistent_slots_;
  std::vector<std::shared_ptr<PersistentSegment>> segments_;
  void* workspace_ptr_ = nullptr;
  std::unique_ptr<PinnedBuffer> in_stage_;                     // inputs (+ zero flags)
  size_t in_bytes_ = 0, in_copy_bytes_ = 0;                    // the inputs; the same with the flags to zero
  size_t body_begin_ = 0;                                      // schedule_'s first thunk after the input copy
  std::vector<IoOutCopy> out_copies_;                          // back_copies_ as kernel copies (queued runs)
  std::unique_ptr<DeviceBuffer> out_copies_dev_;
  std::vector<std::unique_ptr<QueueSlot>> ring_;               // queued runs' staging, made on the first launch
  std::deque<size_t> pending_;                                 // ring slots of the queued runs, oldest first
  size_t next_slot_ = 0;
  std::shared_ptr<PinnedBuffer> back_stage_;                   // flags + outputs, copied out of
  std::vector<std::shared_ptr<PinnedBuffer>> back_blocks_;     // flags + outputs, handed out
  char* back_target_ = nullptr;                                // this run's block
  std::vector<IoSlot> inputs_, outputs_;
  ThunkSchedule schedule_, back_copies_;
  Encoder encoder_;
  std::vector<float> times_ms_;
  struct RunPhases {
    double stage_in_us = 0, launch_us = 0, device_us = 0, wait_us = 0, copy_out_us = 0;
    bool valid = false;
  } phases_;
  std::unique_ptr<Event> run_events_[2];  // made on the first reported run, on this program's device
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : dc_(std::make_unique<DeviceContext>(index)) { register_all_lowerings(); }
  std::string name() const override { return kCudaBackend; }
  DeviceInfo device_info() const override {
    const DeviceProps& p = dc_->props;
    DeviceInfo d;
    d.backend = kCudaBackend;
    d.index = p.index;
    d.name = p.name;
    d.memory_bytes = static_cast<int64_t>(p.total_memory);
    d.details = str(p.sm_count, " SMs, compute capability ", p.cc_major, ".", p.cc_minor, ", L2 ", p.l2_bytes >> 20,
                    " MiB, driver ", version_string(p.driver_version), ", runtime ", version_string(p.runtime_version),
                    ", ", p.uuid);
    return d;
  }
  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_shared<DeviceBuffer>(dc_->index, bytes, "weights/state buffer");
  }
  size_t queue_depth() const override { return kQueueDepth; }
  bool supports(const Graph& g, NodeId id, std::string* why) const override {
    if (g.node(id).is_leaf() || KernelRegistry::global().find(kCudaBackend, g, id)) return true;
    if (why) *why = str("no cuda kernel for ", op_name(g.node(id).op), " ", signature_to_string(KernelRegistry::signature(g, id)));
    return false;
  }
  std::unique_ptr<Program> compile(const Graph& g, const CompileOptions& opts, const BoundBuffers& buffers) override {
    return std::make_unique<CudaProgram>(g, opts, buffers, *dc_);
  }

 private:
  std::unique_ptr<DeviceContext> dc_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int index) { return std::make_shared<CudaBackend>(index); }

void register_cuda_lowering(OpKind op, std::vector<DType> signature, CudaLowering fn, std::string description,
                            bool variadic, std::string custom_name) {
  KernelRegistry::global().add(KernelKey{op, kCudaBackend, std::move(signature), std::move(custom_name), variadic},
                               std::move(fn), std::move(description));
}

void register_cuda_float_lowering(OpKind op, std::vector<DType> signature, const CudaLowering& fn,
                                  const std::string& description, bool variadic) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    auto sig = signature;
    for (auto& d : sig)
      if (d == DType::F32) d = t;
    register_cuda_lowering(op, sig, fn, str(description, " [", dtype_name(t), "]"), variadic);
  }
}

}  // namespace rlx::cuda
