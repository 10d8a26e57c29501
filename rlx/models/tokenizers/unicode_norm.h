// Unicode composition forms for the tokenizers' normalizers (internal header).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rlx::detail {

// `in` (valid UTF-8) in NFC, or in NFKC when `compat`, written to `out`, by
// utf8proc's tables (their Unicode version may be older or newer than the
// Hugging Face library's for recently assigned characters). `scratch` holds
// the code points between calls so a batch reuses one buffer.
void unicode_compose(std::string_view in, bool compat, std::string& out, std::vector<int32_t>& scratch);

}  // namespace rlx::detail
