// ggml's lookup tables for the IQ, IQ4_NL and FP4 formats, under ggml's own
// names so they can be compared with ggml-common.h line by line. Grid rows
// are packed little-endian: byte j of an entry is element j of the row.
// The definitions are generated (scripts/gen_quant_tables.py → quant_tables.cpp).
#pragma once
#include <cstdint>

namespace rlx::ggml_tables {

extern const uint64_t iq2xxs_grid[256];
extern const uint64_t iq2xs_grid[512];
extern const uint64_t iq2s_grid[1024];
extern const uint32_t iq3xxs_grid[256];
extern const uint32_t iq3s_grid[512];
extern const uint64_t iq1s_grid[2048];  // bytes are int8 -1 / 0 / +1
extern const uint8_t ksigns_iq2xs[128];  // 7 sign bits + parity bit
extern const uint8_t kmask_iq2xs[8];
extern const int8_t kvalues_iq4nl[16];
extern const int8_t kvalues_mxfp4[16];  // e2m1 values doubled

}  // namespace rlx::ggml_tables
