// Work an m = 1 quantized GEMV does after its product, in the last of its
// CTAs to finish (kernels/gemv_tail.cuh): a decode layer's rope + KV-cache
// writes (GemvRopeTail, rope.h) or the post-norm pair that reads the product
// (GemvPostNormTail). The CTAs count themselves done on `counter`; the last
// one reads what the others stored (L2) and does the work the separate launch
// would, with the same arithmetic in the same order, so the bits are that
// launch's. Each saves a decode step one launch on its critical path.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/core/dtype.h"

namespace rlx::cuda {

// launch_post_rms_norm's one row with a = the GEMV's product (x, y, h of the
// GEMV's output dtype; w1, w2 of param_dtype; w2 and h null for a single
// norm), laid out as post_rms_norm_layout says (threads ≤ 256, per ≤
// kGemvPostNormTailMaxPer: rows up to 2048 columns; the held columns cost the
// GEMV kernels registers, 8 per column a thread).
inline constexpr int kGemvPostNormTailMaxPer = 8;
struct GemvPostNormTail {
  const void* x = nullptr;
  const void* w1 = nullptr;
  const void* w2 = nullptr;
  void* y = nullptr;
  void* h = nullptr;
  DType param_dtype = DType::F32;
  int cols = 0, threads = 0, per = 0;
  float eps = 0.0f;
};

enum class GemvTailKind : int { None, Rope, PostNorm };

struct GemvTail {
  GemvTailKind kind = GemvTailKind::None;
  GemvRopeTail rope;
  GemvPostNormTail norm;
  int32_t* counter = nullptr;  // zero before a launch; the last CTA leaves it zero
};

// The dynamic shared memory the tail needs (the GEMV's main loop is done with its own by then).
size_t gemv_tail_smem(const GemvTail& t);

// Why a post-norm of `cols` columns cannot be a GEMV's tail (nullptr: it can).
const char* gemv_post_norm_tail_unsupported(int64_t cols);

}  // namespace rlx::cuda
