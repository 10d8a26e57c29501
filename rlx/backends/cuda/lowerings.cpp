#include <mutex>

#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {

void register_all_lowerings() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_matmul_lowerings();
    register_elementwise_lowerings();
    register_norm_lowerings();
    register_reduce_lowerings();
    register_movement_lowerings();
    register_attention_lowerings();
    register_transformer_lowerings();
    register_select_lowerings();
    register_quant_lowerings();
    register_fft_lowerings();
    register_splat_lowerings();
    register_cudnn_lowerings();  // last: wraps the lowerings above
  });
}

}  // namespace rlx::cuda
