// Persistent decode segments: which thunks fuse, where the barriers go, which
// inputs come from shared-memory slots (persistent.h).
//
// Planning walks a run's ops in schedule order with the set of global bytes
// read and written since the last barrier ("the phase"). An op needs a
// barrier before it when it reads bytes the phase wrote (another CTA may not
// have written them yet), or writes bytes the phase read or wrote (another
// CTA may still be reading, or write them after). An input that a local op
// of the run produced, still held in its slot, is read from the slot and is
// no global read at all, so a norm feeding a GEMV costs no barrier.
#include "rlx/backends/cuda/persistent.h"

#include <algorithm>
#include <map>
#include <iostream>
#include <sstream>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/core/env.h"
#include "rlx/core/log.h"

namespace rlx::cuda {

bool PersistentOp::local() const {
  switch (op.kind) {
    case PKind::PostNorm: case PKind::RmsNorm: case PKind::Binary: case PKind::Cast: case PKind::Glu:
    case PKind::AttnMerge:
      return true;
    default:
      return false;
  }
}

std::shared_ptr<const PersistentOps> single_persistent_op(PersistentOp p) {
  return std::make_shared<const PersistentOps>(PersistentOps{std::move(p)});
}

const char* persistent_disabled_reason() {
  if (!env_bool("RLX_CUDA_PERSISTENT")) return "RLX_CUDA_PERSISTENT=0";
  static const std::string why = [] {
    const char* w = persistent_unsupported();
    return std::string(w ? w : "");
  }();
  return why.empty() ? nullptr : why.c_str();
}

bool persistent_enabled() { return persistent_disabled_reason() == nullptr; }

bool to_pfloat(DType t, PFloat* out) {
  switch (t) {
    case DType::F32: *out = PFloat::F32; return true;
    case DType::F16: *out = PFloat::F16; return true;
    case DType::BF16: *out = PFloat::BF16; return true;
    default: return false;
  }
}

namespace {

const char* kind_name(PKind k) {
  switch (k) {
    case PKind::Gemv: return "gemv";
    case PKind::PostNorm: return "post-norm";
    case PKind::RmsNorm: return "rms-norm";
    case PKind::Binary: return "binary";
    case PKind::Cast: return "cast";
    case PKind::Glu: return "glu";
    case PKind::RopeQkv: return "rope+cache";
    case PKind::Attention: return "attention";
    case PKind::AttnMerge: return "attention-merge";
  }
  return "?";
}

bool overlaps_any(const MemRange& r, const std::vector<MemRange>& v) {
  for (const MemRange& x : v)
    if (r.overlaps(x)) return true;
  return false;
}

size_t attn_partial_floats(const PAttn& a) {
  const size_t G = static_cast<size_t>(a.H / a.Hkv);
  return static_cast<size_t>(a.Hkv) * static_cast<size_t>(a.max_chunks) * G * (static_cast<size_t>(a.D) + 2);
}

}  // namespace

PersistentSegment::PersistentSegment(int device, std::vector<PersistentOp> ops, int32_t* const* error_flag)
    : device_(device), ops_(std::move(ops)), error_flag_(error_flag) {
  DeviceGuard guard(device_);
  // Attention partials: one region per attention op, shared with the merge after it.
  size_t floats = 0;
  for (const PersistentOp& p : ops_)
    if (p.op.kind == PKind::Attention) floats += (attn_partial_floats(p.op.attn) + 63) / 64 * 64;
  if (floats) partials_ = std::make_unique<DeviceBuffer>(device_, floats * sizeof(float), "persistent attention partials");
  float* at = partials_ ? static_cast<float*>(partials_->data()) : nullptr;
  for (size_t i = 0; i < ops_.size(); ++i) {
    PersistentOp& p = ops_[i];
    if (p.op.kind != PKind::Attention) continue;
    PAttn& a = p.op.attn;
    const size_t n = attn_partial_floats(a), o_floats = n / (static_cast<size_t>(a.D) + 2) * static_cast<size_t>(a.D);
    a.part_o = at;
    a.part_ml = at + o_floats;
    p.writes.push_back({at, n * sizeof(float)});
    RLX_ASSERT(i + 1 < ops_.size() && ops_[i + 1].op.kind == PKind::AttnMerge);
    ops_[i + 1].op.attn.part_o = a.part_o;
    ops_[i + 1].op.attn.part_ml = a.part_ml;
    ops_[i + 1].reads.push_back({at, n * sizeof(float)});
    at += (n + 63) / 64 * 64;
  }
  // An attention whose caches only this segment's one-row RopeQkv writes reads
  // rows below that op's cache offset (a program input) before its barrier:
  // earlier steps wrote them.
  for (size_t i = 0; i < ops_.size(); ++i) {
    PAttn& a = ops_[i].op.attn;
    if (ops_[i].op.kind != PKind::Attention || a.kv_stable) continue;
    const PersistentOp* writer = nullptr;
    int writers = 0;
    for (const PersistentOp& w : ops_) {
      bool touches = false;
      for (const MemRange& r : w.writes)
        touches |= r.overlaps(ops_[i].reads[1]) || r.overlaps(ops_[i].reads[2]);
      if (!touches || &w == &ops_[i]) continue;
      ++writers;
      if (w.op.kind == PKind::RopeQkv && w.op.out[1].ptr == ops_[i].op.in[1].ptr &&
          w.op.out[2].ptr == ops_[i].op.in[2].ptr)
        writer = &w;
    }
    if (writer && writers == 1) a.kv_stable = writer->op.rope.cache_pos;
  }
  // Rope inverse frequencies, computed on the host in f64 as the rope kernels take them.
  size_t n_freq = 0;
  for (const PersistentOp& p : ops_) n_freq += p.inv_freq.size();
  if (n_freq) {
    freqs_ = std::make_unique<DeviceBuffer>(device_, n_freq * sizeof(double), "persistent rope frequencies");
    auto* f = static_cast<double*>(freqs_->data());
    for (PersistentOp& p : ops_) {
      if (p.inv_freq.empty()) continue;
      freqs_->upload(p.inv_freq.data(), p.inv_freq.size() * sizeof(double),
                     static_cast<size_t>(f - static_cast<double*>(freqs_->data())) * sizeof(double));
      p.op.rope.inv_freq = f;
      f += p.inv_freq.size();
    }
  }
  const PersistentPlan plan = plan_persistent_ops(ops_);
  RLX_ASSERT(plan.placed == ops_.size());  // fuse_persistent_segments only passes runs that plan whole
  barriers_ = plan.barriers;
  launch_.slot_elems = plan.slot_elems;
  launch_.scratch_bytes = plan.scratch_bytes;
  sync_ = std::make_unique<DeviceBuffer>(device_, 2 * sizeof(uint32_t), "persistent kernel barrier");
  sync_->fill_zero();
  table_ = std::make_unique<DeviceBuffer>(device_, ops_.size() * sizeof(POp), "persistent kernel op table");
  launch_.n_ops = static_cast<int32_t>(ops_.size());
  launch_.ops = static_cast<const POp*>(table_->data());
  launch_.sync = static_cast<uint32_t*>(sync_->data());
  launch_.grid = device_props(device_).sm_count;
  if (env_bool("RLX_CUDA_PERSISTENT_PROFILE")) {
    profile_ = std::make_unique<DeviceBuffer>(device_, (2 * ops_.size() + 1) * sizeof(uint64_t), "persistent kernel profile");
    profile_->fill_zero();
    launch_.profile = static_cast<unsigned long long*>(profile_->data());
  }
}

PersistentSegment::~PersistentSegment() {
  if (!profile_) return;
  try {
    DeviceGuard guard(device_);
    RLX_CUDA_CHECK(cudaDeviceSynchronize());
    const size_t n = ops_.size();
    std::vector<uint64_t> ns(2 * n + 1);
    profile_->download(ns.data(), ns.size() * sizeof(uint64_t));
    const double launches = static_cast<double>(std::max<uint64_t>(ns.back(), 1));
    struct Row {
      double us = 0, wait_us = 0;
      int count = 0;
    };
    std::map<std::string, Row> by_kind;
    double total = 0, waits = 0;
    for (size_t i = 0; i < n; ++i) {
      const double us = static_cast<double>(ns[i]) / launches / 1e3, w = static_cast<double>(ns[n + i]) / launches / 1e3;
      Row& r = by_kind[str(kind_name(ops_[i].op.kind), ops_[i].op.barrier ? " (after a barrier)" : "")];
      r.us += us;
      r.wait_us += w;
      ++r.count;
      total += us;
      waits += w;
    }
    std::cerr << "persistent kernel profile (CTA 0's time per op, " << ns.back() << " launches): " << total
              << " us per launch, " << waits << " us of it waiting at barriers\n";
    for (const auto& [name, r] : by_kind)
      std::cerr << "  " << name << ": " << r.count << " ops, " << r.us << " us (" << r.us / r.count << " us each, "
                << r.wait_us / r.count << " us of it at the barrier)\n";
  } catch (const std::exception& e) {
    std::cerr << "persistent kernel profile: " << e.what() << "\n";
  }
}

PersistentPlan plan_persistent_ops(std::vector<PersistentOp>& ops) {
  struct Slot {
    MemRange range;
    PFloat dtype = PFloat::F32;
    bool valid = false;
  };
  PersistentPlan plan;
  plan.placed = ops.size();
  Slot slots[kPersistentSlots];
  int next = 0;
  int64_t slot_elems = 4;
  std::vector<MemRange> phase_reads, phase_writes;
  for (size_t i = 0; i < ops.size(); ++i) {
    PersistentOp& p = ops[i];
    std::vector<MemRange> reads = p.reads;
    int used[3] = {-1, -1, -1};
    for (int k = 0; k < 3; ++k) {
      const PIn& in = p.op.in[k];
      p.op.in[k].slot = -1;
      if (!in.ptr || !p.in_bytes[k]) continue;
      for (int s = 0; s < kPersistentSlots; ++s) {
        const Slot& sl = slots[s];
        if (!sl.valid || sl.range.p != in.ptr || sl.dtype != in.dtype || sl.range.bytes < p.in_bytes[k]) continue;
        p.op.in[k].slot = s;
        used[k] = s;
        const MemRange r{in.ptr, p.in_bytes[k]};
        reads.erase(std::remove_if(reads.begin(), reads.end(),
                                   [&](const MemRange& x) { return x.p == r.p && x.bytes == r.bytes; }),
                    reads.end());
        break;
      }
    }
    // An op that writes bytes it reads from global memory would race with
    // itself across CTAs (the memory plan may give a fused GLU's output the
    // block of the GEMV's input); it cannot join the segment.
    for (const MemRange& w : p.writes)
      if (overlaps_any(w, reads)) {
        plan.placed = i;
        return plan;
      }
    bool hazard = false;
    for (const MemRange& r : reads) hazard |= overlaps_any(r, phase_writes);
    for (const MemRange& w : p.writes) hazard |= overlaps_any(w, phase_reads) || overlaps_any(w, phase_writes);
    p.op.barrier = 0;
    if (hazard && i > 0) {
      p.op.barrier = 1;
      ++plan.barriers;
      phase_reads.clear();
      phase_writes.clear();
    }
    phase_reads.insert(phase_reads.end(), reads.begin(), reads.end());
    phase_writes.insert(phase_writes.end(), p.writes.begin(), p.writes.end());
    for (Slot& sl : slots)
      if (sl.valid && overlaps_any(sl.range, p.writes)) sl.valid = false;
    if (!p.local()) continue;
    for (int k = 0; k < 3; ++k) {
      POut& o = p.op.out[k];
      if (!o.ptr) continue;
      int s = next;
      // Never the slot of one of this op's own inputs, nor of its other outputs.
      auto taken = [&](int c) {
        for (int u : used)
          if (u == c) return true;
        for (int j = 0; j < k; ++j)
          if (p.op.out[j].ptr && p.op.out[j].slot == c) return true;
        return false;
      };
      while (taken(s)) s = (s + 1) % kPersistentSlots;
      next = (s + 1) % kPersistentSlots;
      o.slot = s;
      slots[s] = Slot{{o.ptr, static_cast<size_t>(p.out_elems[k]) * pfloat_bytes(o.dtype)}, o.dtype, true};
      slot_elems = std::max(slot_elems, (p.out_elems[k] + 3) / 4 * 4);
    }
  }
  plan.slot_elems = static_cast<int32_t>(slot_elems);
  size_t scratch = 0;
  for (const PersistentOp& p : ops) scratch = std::max(scratch, persistent_scratch_bytes(p.op));
  plan.scratch_bytes = (scratch + 15) / 16 * 16;
  return plan;
}

void PersistentSegment::finalize() {
  DeviceGuard guard(device_);
  launch_.error_flag = error_flag_ ? *error_flag_ : nullptr;
  std::vector<POp> table;
  table.reserve(ops_.size());
  for (PersistentOp& p : ops_) {
    p.op.error_flag = p.error_flag ? *p.error_flag : nullptr;
    table.push_back(p.op);
  }
  table_->upload(table.data(), table.size() * sizeof(POp));
}

std::string PersistentSegment::describe() const {
  std::map<std::string, int> counts;
  for (const PersistentOp& p : ops_) ++counts[kind_name(p.op.kind)];
  std::ostringstream os;
  os << "persistent decode kernel: " << ops_.size() << " ops (";
  bool first = true;
  for (const auto& [name, n] : counts) {
    os << (first ? "" : ", ") << n << " " << name;
    first = false;
  }
  os << "), " << barriers_ << " grid barriers, " << launch_.grid << " CTAs, "
     << persistent_smem_bytes(launch_) / 1024 << " KB shared memory";
  return os.str();
}

std::vector<std::shared_ptr<PersistentSegment>> fuse_persistent_segments(
    ThunkSchedule& s, int device, const std::function<int32_t* const*(NodeId)>& flag_for, int min_distributed) {
  std::vector<std::shared_ptr<PersistentSegment>> out;
  std::vector<Thunk> kept;
  const DeviceProps& props = device_props(device);
  size_t i = 0;
  while (i < s.thunks.size()) {
    // The longest run of thunks from i that all carry persistent ops and plan
    // as one segment (an op that cannot be placed ends it).
    std::vector<PersistentOp> ops;
    std::vector<size_t> op_thunk;
    size_t e = i;
    while (e < s.thunks.size() && s.thunks[e].persistent) {
      for (const PersistentOp& p : *s.thunks[e].persistent) {
        ops.push_back(p);
        op_thunk.push_back(e);
      }
      ++e;
    }
    if (!ops.empty()) {
      std::vector<PersistentOp> trial = ops;
      const size_t placed = plan_persistent_ops(trial).placed;
      if (placed < ops.size()) {
        e = op_thunk[placed];
        while (!ops.empty() && op_thunk[ops.size() - 1] >= e) ops.pop_back();
      }
    }
    int distributed = 0;
    for (const PersistentOp& p : ops) distributed += !p.local();
    if (e > i && distributed < min_distributed)
      log_verbose("cuda: ", e - i, " persistent-capable thunks from ", s.thunks[i].kernel, " left as they are: ",
                  distributed, " distributed ops, fewer than ", min_distributed);
    if (e == i || distributed < min_distributed) {
      for (size_t k = i; k < std::max(e, i + 1); ++k) kept.push_back(std::move(s.thunks[k]));
      i = std::max(e, i + 1);
      continue;
    }
    std::vector<std::string> names;  // what the fused thunks were, for the dispatch report
    for (size_t k = i; k < e; ++k)
      if (std::find(names.begin(), names.end(), s.thunks[k].kernel) == names.end()) names.push_back(s.thunks[k].kernel);
    const NodeId first = s.thunks[i].node;
    auto seg = std::make_shared<PersistentSegment>(device, std::move(ops), flag_for(first));
    if (seg->smem_bytes() > props.smem_per_block_optin) {
      log_verbose("cuda: persistent segment of ", seg->size(), " ops needs ", seg->smem_bytes(),
                  " bytes of shared memory, more than the device's ", props.smem_per_block_optin, "; not fused");
      for (size_t k = i; k < e; ++k) kept.push_back(std::move(s.thunks[k]));
    } else {
      std::string what = seg->describe();
      log_verbose("cuda: ", what);
      what += "; in place of:";
      for (const std::string& n : names) what += " [" + n + "]";
      kept.push_back(Thunk{first, std::move(what), [seg](cudaStream_t st) { seg->launch(st); }, nullptr});
      out.push_back(std::move(seg));
    }
    i = e;
  }
  s.thunks = std::move(kept);
  return out;
}

}  // namespace rlx::cuda
