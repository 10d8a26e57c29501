// Queued runs' input and output copies as kernels (io_stage.h).
#include "rlx/backends/cuda/kernels/io_stage.h"

#include <algorithm>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"

namespace rlx::cuda {
namespace {

constexpr int kThreads = 256;

// It never waits or triggers: nothing in its graph runs before it, and the
// encoder keeps the edge out of it a full dependency.
__global__ void __launch_bounds__(kThreads) io_stage_in_kernel(const uint8_t* stage, uint8_t* dst, size_t bytes) {
  __shared__ IoStageHeader h;
  constexpr int kHeaderVecs = static_cast<int>(sizeof(IoStageHeader) / 16);
  static_assert(sizeof(IoStageHeader) % 16 == 0, "header in 16-byte loads");
  const auto* src = reinterpret_cast<const int4*>(stage + kIoStageHeaderBytes);
  const size_t vecs = bytes / 16, first = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  // Host memory, fetched again each run (never from a cache). A thread's
  // first 16 bytes are requested with the header: one PCIe round trip, not two.
  int4 v0 = first < vecs ? __ldcv(src + first) : int4{};
  if (threadIdx.x < kHeaderVecs)
    reinterpret_cast<int4*>(&h)[threadIdx.x] = __ldcv(reinterpret_cast<const int4*>(stage) + threadIdx.x);
  __syncthreads();
  const int feeds = static_cast<int>(min(h.feeds, static_cast<uint32_t>(kMaxIoFeeds)));
  for (size_t c = first; c < vecs; c += static_cast<size_t>(gridDim.x) * kThreads) {
    int4 v = c == first ? v0 : __ldcv(src + c);
    const size_t lo = c * 16;
    bool fed = false;
    for (int f = 0; f < feeds; ++f) fed |= h.feed[f].dst < lo + 16 && h.feed[f].dst + h.feed[f].bytes > lo;
    if (fed) {
      // A feed's bytes in this vector are requested together (a later feed
      // overwrites an earlier one), and the vector stays in registers: a
      // byte loop into it put each load behind the last one's store.
      uint32_t w[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z),
                       static_cast<uint32_t>(v.w)};
      for (int f = 0; f < feeds; ++f) {
        const size_t d = h.feed[f].dst, end = d + h.feed[f].bytes;
        const auto* fsrc = static_cast<const uint8_t*>(h.feed[f].src);
        uint32_t got[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) got[i] = lo + i >= d && lo + i < end ? __ldcg(fsrc + (lo + i - d)) : 256u;
#pragma unroll
        for (int i = 0; i < 16; ++i)
          if (got[i] < 256u) w[i / 4] = (w[i / 4] & ~(0xffu << (8 * (i % 4)))) | (got[i] << (8 * (i % 4)));
      }
      v = make_int4(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
    }
    reinterpret_cast<int4*>(dst)[c] = v;
  }
}

__global__ void __launch_bounds__(kThreads) io_stage_out_kernel(const IoOutCopy* copies, uint8_t* host) {
  dev::pdl_begin();  // the outputs are the work of the kernels before
  const IoOutCopy c = copies[blockIdx.y];
  const auto* src = static_cast<const uint8_t*>(c.src);
  uint8_t* dst = host + c.dst;
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t first = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool vec = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0;
  const size_t vecs = vec ? c.bytes / 16 : 0;
  for (size_t i = first; i < vecs; i += stride)
    reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
  for (size_t i = vecs * 16 + first; i < c.bytes; i += stride) dst[i] = src[i];
}

unsigned blocks_for(size_t bytes) {
  return static_cast<unsigned>(std::clamp<size_t>((bytes / 16 + kThreads - 1) / kThreads, 1, 64));
}

}  // namespace

void launch_io_stage_in(const void* stage, void* dst, size_t bytes, cudaStream_t stream) {
  RLX_CHECK(bytes % 16 == 0, "io stage: ", bytes, " bytes is not a multiple of 16");
  if (bytes == 0) return;
  io_stage_in_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(static_cast<const uint8_t*>(stage),
                                                                  static_cast<uint8_t*>(dst), bytes);
  RLX_CUDA_CHECK_LAUNCH("io stage in");
}

void launch_io_stage_out(const IoOutCopy* copies, int n, size_t max_bytes, void* host, cudaStream_t stream) {
  if (n == 0) return;
  RLX_CHECK(n <= 65535, "io stage: ", n, " output copies");
  io_stage_out_kernel<<<dim3(blocks_for(max_bytes), static_cast<unsigned>(n)), kThreads, 0, stream>>>(
      copies, static_cast<uint8_t*>(host));
  RLX_CUDA_CHECK_LAUNCH("io stage out");
}

}  // namespace rlx::cuda
