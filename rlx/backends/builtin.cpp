// Registers the backends compiled into this build.
#include <mutex>

#include "rlx/backends/cpu/cpu_backend.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#ifdef RLX_HAVE_CUDA
#include "rlx/backends/cuda/cuda_backend.h"
#endif

namespace rlx {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend({"cpu", [] { return 1; }, [](int) { return cpu::make_cpu_backend(); }});
#ifdef RLX_HAVE_CUDA
    register_backend({"cuda", cuda::device_count, cuda::make_cuda_backend});
#endif
  });
}

}  // namespace rlx
