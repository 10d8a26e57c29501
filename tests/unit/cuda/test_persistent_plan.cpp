// The persistent decode kernel's planner (rlx/backends/cuda/persistent.h):
// where grid barriers go, which inputs come from shared-memory slots, and
// which ops cannot join a segment. Host arithmetic only: runs without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "rlx/backends/cuda/persistent.h"

using namespace rlx;
using namespace rlx::cuda;

namespace {

// Fake device addresses: offsets into one aligned block, never dereferenced.
alignas(256) char g_mem[1 << 20];
char* at(size_t off) { return g_mem + off; }

constexpr size_t kRow = 640 * 2;  // one bf16 row of 640

PersistentOp gemv(const void* x, size_t x_bytes, void* y, size_t y_bytes) {
  PersistentOp p;
  p.op.kind = PKind::Gemv;
  p.op.in[0] = PIn{x, -1, PFloat::BF16};
  p.in_bytes[0] = x_bytes;
  p.op.out[0] = POut{y, -1, PFloat::BF16};
  p.out_elems[0] = static_cast<int64_t>(y_bytes / 2);
  p.reads = {{x, x_bytes}};
  p.writes = {{y, y_bytes}};
  return p;
}

// y = x + rms(a)·w1, h = rms(y)·w2.
PersistentOp post_norm_pair(const void* x, const void* a, void* y, void* h) {
  PersistentOp p;
  p.op.kind = PKind::PostNorm;
  p.op.norm.cols = 640;
  p.op.in[0] = PIn{x, -1, PFloat::BF16};
  p.op.in[1] = PIn{a, -1, PFloat::BF16};
  p.in_bytes[0] = p.in_bytes[1] = kRow;
  p.op.out[0] = POut{y, -1, PFloat::BF16};
  p.op.out[1] = POut{h, -1, PFloat::BF16};
  p.out_elems[0] = p.out_elems[1] = 640;
  p.reads = {{x, kRow}, {a, kRow}};
  p.writes = {{y, kRow}, {h, kRow}};
  return p;
}

TEST(PersistentPlan, GemmaLayerBarriersAndSlots) {
  // Buffers of one decode layer (offsets in g_mem).
  char *x0 = at(0), *h0 = at(0x1000), *qkv = at(0x2000), *q = at(0x4000), *kc = at(0x10000), *vc = at(0x30000);
  char *part = at(0x50000), *attn = at(0x60000), *o = at(0x61000), *x1 = at(0x62000), *h1 = at(0x63000);
  char *g = h0;  // the GLU output reuses the block of the GEMV's input (the memory plan may do that)
  char *d = at(0x64000), *x2 = at(0x65000), *h2 = at(0x66000);
  std::vector<PersistentOp> ops;
  ops.push_back(gemv(h0, kRow, qkv, 1536 * 2));  // 0: h0 comes from before the segment
  PersistentOp rope;  // 1
  rope.op.kind = PKind::RopeQkv;
  rope.op.rope.head_dim = 256;
  rope.reads = {{qkv, 1536 * 2}};
  rope.writes = {{q, 1024 * 2}, {kc, 0x20000}, {vc, 0x20000}};
  ops.push_back(rope);
  PersistentOp att;  // 2
  att.op.kind = PKind::Attention;
  att.op.attn.H = 4;
  att.op.attn.Hkv = 1;
  att.op.attn.D = 256;
  att.op.attn.chunk = 64;
  att.op.in[0] = PIn{q, -1, PFloat::BF16};
  att.in_bytes[0] = 1024 * 2;
  att.reads = {{q, 1024 * 2}, {kc, 0x20000}, {vc, 0x20000}};
  att.writes = {{part, 0x8000}};
  ops.push_back(att);
  PersistentOp merge;  // 3
  merge.op.kind = PKind::AttnMerge;
  merge.op.attn = att.op.attn;
  merge.op.out[0] = POut{attn, -1, PFloat::BF16};
  merge.out_elems[0] = 1024;
  merge.reads = {{part, 0x8000}};
  merge.writes = {{attn, 1024 * 2}};
  ops.push_back(merge);
  ops.push_back(gemv(attn, 1024 * 2, o, kRow));             // 4
  ops.push_back(post_norm_pair(x0, o, x1, h1));              // 5
  ops.push_back(gemv(h1, kRow, g, 2048 * 2));                // 6 (GLU: reads h1 from its slot)
  ops.push_back(gemv(g, 2048 * 2, d, kRow));                 // 7
  ops.push_back(post_norm_pair(x1, d, x2, h2));              // 8
  ops.push_back(gemv(h2, kRow, qkv, 1536 * 2));              // 9: next layer's QKV
  const PersistentPlan plan = plan_persistent_ops(ops);
  ASSERT_EQ(plan.placed, ops.size());
  const std::vector<int> want_barrier = {0, 1, 1, 1, 0, 1, 0, 1, 1, 0};
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(ops[i].op.barrier, want_barrier[i]) << "op " << i;
  EXPECT_EQ(plan.barriers, 6);
  // Local results feed the next op through slots.
  EXPECT_EQ(ops[0].op.in[0].slot, -1);                     // from before the segment
  EXPECT_EQ(ops[4].op.in[0].slot, ops[3].op.out[0].slot);  // merge → O projection
  EXPECT_EQ(ops[6].op.in[0].slot, ops[5].op.out[1].slot);  // post-norm h → gate|up
  EXPECT_EQ(ops[8].op.in[0].slot, ops[5].op.out[0].slot);  // the residual stream x1, still in its slot
  EXPECT_EQ(ops[8].op.in[1].slot, -1);                     // d: written by the distributed down projection
  EXPECT_EQ(ops[9].op.in[0].slot, ops[8].op.out[1].slot);
  EXPECT_NE(ops[5].op.out[0].slot, ops[5].op.out[1].slot);
  EXPECT_EQ(plan.slot_elems, 1024);
}

TEST(PersistentPlan, AnOpWritingWhatItReadsFromGlobalEndsTheSegment) {
  char *x = at(0), *y = at(0x1000);
  std::vector<PersistentOp> ops;
  ops.push_back(gemv(x, kRow, y, 2048 * 2));
  ops.push_back(gemv(y, 2048 * 2, y, kRow));  // reads y from global (a distributed result) and overwrites it
  ops.push_back(gemv(y, kRow, x, kRow));
  EXPECT_EQ(plan_persistent_ops(ops).placed, 1u);
}

TEST(PersistentPlan, WriteAfterReadInOnePhaseNeedsABarrier) {
  char *x = at(0), *y = at(0x1000), *z = at(0x2000);
  std::vector<PersistentOp> ops;
  ops.push_back(gemv(x, kRow, y, kRow));
  ops.push_back(gemv(z, kRow, x, kRow));  // overwrites x while other CTAs may still read it for op 0
  const PersistentPlan plan = plan_persistent_ops(ops);
  ASSERT_EQ(plan.placed, 2u);
  EXPECT_EQ(ops[1].op.barrier, 1);
  // Independent GEMVs of one input share a phase.
  std::vector<PersistentOp> side = {gemv(x, kRow, y, kRow), gemv(x, kRow, z, kRow)};
  plan_persistent_ops(side);
  EXPECT_EQ(side[1].op.barrier, 0);
}

TEST(PersistentPlan, EvictedSlotsAreReadFromGlobalAfterABarrier) {
  // Five local results: the first is evicted from the four-slot ring, so its
  // reader goes to global memory, which CTA 0 wrote in this phase.
  char* x = at(0);
  std::vector<PersistentOp> ops;
  char* outs[5];
  for (int i = 0; i < 5; ++i) {
    outs[i] = at(0x1000 * static_cast<size_t>(i + 1));
    PersistentOp c;
    c.op.kind = PKind::Cast;
    c.op.in[0] = PIn{x, -1, PFloat::BF16};
    c.in_bytes[0] = kRow;
    c.op.out[0] = POut{outs[i], -1, PFloat::BF16};
    c.out_elems[0] = 640;
    c.reads = {{x, kRow}};
    c.writes = {{outs[i], kRow}};
    ops.push_back(c);
  }
  ops.push_back(gemv(outs[0], kRow, at(0x10000), kRow));
  ops.push_back(gemv(outs[4], kRow, at(0x11000), kRow));
  plan_persistent_ops(ops);
  EXPECT_EQ(ops[5].op.in[0].slot, -1);
  EXPECT_EQ(ops[5].op.barrier, 1);
  EXPECT_GE(ops[6].op.in[0].slot, 0);
}

}  // namespace
