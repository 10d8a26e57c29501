#pragma once
#include <string>

#include "rlx/core/dtype.h"

namespace rlx {

struct CompileOptions {
  // Storage and compute precision for float activations and weights:
  // f32, f16 or bf16. Norm statistics and accumulations stay in f32.
  DType precision = DType::F32;
  // Allow TF32 tensor-core math for f32 matmuls (GPU only; faster, ~1e-3 relative error).
  bool allow_tf32 = false;
  // Apply fusion rules (matmul+bias+act, residual+norm, ...).
  bool fuse = true;
  // Capture and replay CUDA graphs (RLX_CUDA_GRAPHS=0 also turns this off).
  bool cuda_graphs = true;

  std::string key() const;  // part of the compile-cache key
};

}  // namespace rlx
