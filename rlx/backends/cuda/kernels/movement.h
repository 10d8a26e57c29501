// Data-movement launchers: transpose, narrow, concat, expand, gather and
// write_slice (kernels in movement.cu). All are dtype-agnostic (they move
// elements of `elem_size` bytes: 1, 2, 4, 8 or 16), asynchronous on `stream`,
// allocate nothing, and throw rlx::DeviceError naming the op when a launch fails.
//
// Device error flag: gather, write_slice and rope_kv_write take a nullable
// `int32_t* error_flag` in device memory. A kernel that meets a bad index or
// offset (only knowable on the device) ORs a bit below into it instead of
// reading or writing out of bounds; the caller zeroes the flag and checks it
// after its next host sync (e.g. at the end of a graph replay).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

inline constexpr int32_t kErrIndexOutOfRange = 1;  // gather: an index outside [0, rows); that output row is zeros
inline constexpr int32_t kErrSliceOutOfRange = 2;  // write_slice / kv write: offset range outside the state; no write

inline constexpr int kMaxMoveRank = 6;

// y = x.permute(perm): x has dims in_dims[0..rank), y has dims
// in_dims[perm[i]]. Dims are merged where the permutation keeps them adjacent;
// a permutation that swaps the last two (merged) dims uses a 32×32 shared-
// memory tile (both reads and writes coalesced), others a strided gather with
// 16-byte moves when the innermost run allows. rank ≤ 6.
void launch_transpose(size_t elem_size, const void* x, void* y, const int64_t* in_dims, const int* perm, int rank,
                      cudaStream_t stream);

// y [outer, length, inner] = x [outer, axis_len, inner][:, start:start+length, :].
void launch_narrow(size_t elem_size, const void* x, void* y, int64_t outer, int64_t axis_len, int64_t start,
                   int64_t length, int64_t inner, cudaStream_t stream);

// y [outer, Σ lens, inner] = concat of inputs[i] [outer, lens[i], inner] along
// the middle axis. `inputs` and `lens` are host arrays of n entries.
void launch_concat(size_t elem_size, const void* const* inputs, const int64_t* lens, int n, void* y, int64_t outer,
                   int64_t inner, cudaStream_t stream);

// y [out_dims] = broadcast of x whose dims (same rank, ≤ 6) equal out_dims or 1.
void launch_expand(size_t elem_size, const void* x, void* y, const int64_t* in_dims, const int64_t* out_dims,
                   int rank, cudaStream_t stream);

// y [outer, n_idx, inner] = table [outer, rows, inner][:, idx[j], :] with idx
// i32 or i64 (index_dtype). Embedding lookup is outer = 1, inner = width. An
// index outside [0, rows) (negative included) writes a zero row and sets
// kErrIndexOutOfRange; nothing is read out of bounds.
void launch_gather(size_t elem_size, const void* table, int64_t outer, int64_t rows, int64_t inner,
                   DType index_dtype, const void* idx, int64_t n_idx, void* y, int32_t* error_flag,
                   cudaStream_t stream);

// state [outer, state_len, inner][:, off:off+update_len, :] = update, where
// off = *offset (i32 in device memory, read by the kernel so graph replays see
// the current value). If off < 0 or off + update_len > state_len nothing is
// written and kErrSliceOutOfRange is set.
void launch_write_slice(size_t elem_size, void* state, const void* update, const int32_t* offset, int64_t outer,
                        int64_t state_len, int64_t update_len, int64_t inner, int32_t* error_flag,
                        cudaStream_t stream);

// launch_write_slice for a float update (f32/f16/bf16) stored into a state of
// another float type, each element converted through f32 (round to nearest even).
void launch_write_slice_convert(DType state_dtype, DType update_dtype, void* state, const void* update,
                                const int32_t* offset, int64_t outer, int64_t state_len, int64_t update_len,
                                int64_t inner, int32_t* error_flag, cudaStream_t stream);

}  // namespace rlx::cuda
