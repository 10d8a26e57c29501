// FusedSwiGLU / FusedGeGLU: y[r, j] = act(x[r, j]) · x[r, n + j].
//
// Memory plan: a 2-D grid, blockIdx.y strides over rows and x-threads over
// 16-byte vectors of the row, so each thread loads one vector of the gate half
// and the matching vector of the up half (both coalesced across the warp) and
// stores one vector of y. Bytes: 3 · rows · n · sizeof(T). Rows whose n is not
// a multiple of the vector width, or misaligned pointers, take the scalar
// variant of the same kernel.
#include "rlx/backends/cuda/kernels/glu.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/glu_act.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"

namespace rlx::cuda {
namespace {

using dev::from_f32;
using dev::to_f32;

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, GluKind K, int V>
__global__ void __launch_bounds__(256) glu_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  dev::pdl_begin();
  const int64_t nv = n / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* gate = x + r * 2 * n;
    const T* up = gate + n;
    T* out = y + r * n;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < nv;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const Vec<T, V> g = reinterpret_cast<const Vec<T, V>*>(gate)[j];
      const Vec<T, V> u = reinterpret_cast<const Vec<T, V>*>(up)[j];
      Vec<T, V> o;
#pragma unroll
      for (int i = 0; i < V; ++i) o.v[i] = from_f32<T>(dev::glu_act<K>(to_f32(g.v[i])) * to_f32(u.v[i]));
      reinterpret_cast<Vec<T, V>*>(out)[j] = o;
    }
  }
}

template <typename T, GluKind K>
void launch_t(const T* x, T* y, int64_t rows, int64_t n, cudaStream_t stream) {
  constexpr int V = static_cast<int>(16 / sizeof(T));
  const bool vec = n % V == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0;
  const int64_t per_row = vec ? n / V : n;
  const int64_t bx = (per_row + 255) / 256;
  const dim3 grid(static_cast<unsigned>(bx < 1024 ? bx : 1024), static_cast<unsigned>(rows < 65535 ? rows : 65535));
  if (vec) glu_kernel<T, K, V><<<grid, 256, 0, stream>>>(x, y, rows, n);
  else glu_kernel<T, K, 1><<<grid, 256, 0, stream>>>(x, y, rows, n);
}

}  // namespace

void launch_glu(GluKind kind, DType dtype, const void* x, void* y, int64_t rows, int64_t n, cudaStream_t stream) {
  const char* op = kind == GluKind::SwiGLU ? "FusedSwiGLU" : "FusedGeGLU";
  if (rows <= 0 || n <= 0) return;
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    switch (kind) {
      case GluKind::SwiGLU: launch_t<T, GluKind::SwiGLU>(xt, yt, rows, n, stream); break;
      case GluKind::GeGLUErf: launch_t<T, GluKind::GeGLUErf>(xt, yt, rows, n, stream); break;
      case GluKind::GeGLUTanh: launch_t<T, GluKind::GeGLUTanh>(xt, yt, rows, n, stream); break;
    }
    RLX_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace rlx::cuda
