// Persistent decode segments (the CUDA counterpart of batching a whole
// command stream into one dispatch): a lowering whose node can run inside
// the persistent kernel (kernels/persistent.h) attaches that form to its
// thunk; after lowering, fuse_persistent_segments replaces every long enough
// run of such thunks with one launch of the persistent kernel, placing grid
// barriers only where the ops' data need them.
//
// RLX_CUDA_PERSISTENT=1 turns it on (off by default: correct, but measured
// slower than the per-op kernels on the H200 so far, docs/performance.md);
// the results agree with the per-op kernels to f32 rounding (the GEMVs sum
// in another order and take f32 activations where some per-op GEMVs take int8).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/backends/cuda/encoder.h"
#include "rlx/backends/cuda/kernels/persistent.h"
#include "rlx/backends/cuda/memory.h"

namespace rlx::cuda {

// Bytes of device memory an op reads or writes.
struct MemRange {
  const void* p = nullptr;
  size_t bytes = 0;
  bool overlaps(const MemRange& o) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(o.p);
    return bytes && o.bytes && a < b + o.bytes && b < a + bytes;
  }
};

// One op of a node in the persistent kernel's form, with the activations it
// reads and writes (weights, constants and norm weights are read-only and
// not listed). in_bytes[i] is the extent of op.in[i] as the op reads it, so
// that a local op's slot can stand in for it; out_elems[i] the elements of
// op.out[i].
struct PersistentOp {
  POp op;
  std::vector<MemRange> reads, writes;
  size_t in_bytes[3] = {};
  int64_t out_elems[3] = {};
  int32_t* const* error_flag = nullptr;  // resolved into op.error_flag once flags are bound
  std::vector<double> inv_freq;          // RopeQkv: uploaded by the segment into op.rope.inv_freq
  bool local() const;
};
using PersistentOps = std::vector<PersistentOp>;

// `p` as the single op of a thunk.
std::shared_ptr<const PersistentOps> single_persistent_op(PersistentOp p);

// Where the barriers go and which inputs come from slots (sets op.barrier,
// in[].slot, out[].slot of `ops`); host arithmetic only. `placed` < ops.size()
// names the first op that cannot run in one segment with those before it: it
// writes bytes it reads from global memory, which CTAs would race on.
struct PersistentPlan {
  size_t placed = 0;
  int barriers = 0;
  int32_t slot_elems = 4;
  size_t scratch_bytes = 0;
};
PersistentPlan plan_persistent_ops(std::vector<PersistentOp>& ops);

// Whether lowerings should describe their ops for the persistent kernel
// (RLX_CUDA_PERSISTENT and a device that can run it); if not, why.
bool persistent_enabled();
const char* persistent_disabled_reason();

// The element byte size of a PFloat.
inline size_t pfloat_bytes(PFloat t) { return t == PFloat::F32 ? 4 : 2; }
// PFloat of a float dtype; false for any other.
bool to_pfloat(DType t, PFloat* out);

// A fused segment: its op table on the device, barrier words, attention
// partials. Owned by the program (the fused thunk holds it too).
class PersistentSegment {
 public:
  PersistentSegment(int device, std::vector<PersistentOp> ops, int32_t* const* error_flag);
  ~PersistentSegment();  // with RLX_CUDA_PERSISTENT_PROFILE, prints the per-op profile
  PersistentSegment(const PersistentSegment&) = delete;
  PersistentSegment& operator=(const PersistentSegment&) = delete;
  // Once error flags are bound: resolves them and uploads the table.
  void finalize();
  void launch(cudaStream_t stream) const { launch_persistent(launch_, stream); }
  std::string describe() const;
  int barriers() const { return barriers_; }
  size_t size() const { return ops_.size(); }
  size_t smem_bytes() const { return persistent_smem_bytes(launch_); }

 private:
  int device_;
  std::vector<PersistentOp> ops_;
  int32_t* const* error_flag_;
  std::unique_ptr<DeviceBuffer> table_, sync_, partials_, freqs_, profile_;
  PersistentLaunch launch_;
  int barriers_ = 0;
};

// Replaces each run of at least `min_distributed` distributed ops (thunks
// that all carry persistent ops) with one thunk launching the persistent
// kernel. `flag_for(node)` gives the device error flag the segment reports a
// barrier timeout through. Returns the segments (finalize them once the
// program's flags are bound).
std::vector<std::shared_ptr<PersistentSegment>> fuse_persistent_segments(
    ThunkSchedule& s, int device, const std::function<int32_t* const*(NodeId)>& flag_for, int min_distributed = 4);

}  // namespace rlx::cuda
