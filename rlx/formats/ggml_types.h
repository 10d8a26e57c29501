// ggml type ids (ggml.h `enum ggml_type`, as stored in GGUF tensor infos) and
// their rlx DType. Ids that ggml retired (4, 5, 31-33, 36-38) have no DType
// and are reported by name.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "rlx/core/dtype.h"

namespace rlx {

// The DType for a ggml type id, or nullopt when rlx has none.
std::optional<DType> dtype_from_ggml_opt(uint32_t ggml_type);
// As above, but throws FormatError ("unknown ggml type id 99" or
// "ggml type 31 (q4_0_4_4) is not supported by rlx").
DType dtype_from_ggml(uint32_t ggml_type);
// The ggml type id of a DType, or nullopt for DTypes with no ggml id
// (u8, bool, c64, fp8).
std::optional<uint32_t> ggml_type_of(DType dtype);
// As above, but throws Unsupported naming the dtype.
uint32_t ggml_type_id(DType dtype);
// ggml's lower-case name for any id it ever defined ("q4_k", "q4_0_4_4"),
// or "" for ids it never used.
std::string_view ggml_type_name(uint32_t ggml_type);

}  // namespace rlx
