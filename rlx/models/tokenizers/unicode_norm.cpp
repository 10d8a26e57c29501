#include "rlx/models/tokenizers/unicode_norm.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>

#include "rlx/core/error.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx::detail {

static_assert(sizeof(utf8proc_int32_t) == sizeof(int32_t));

void unicode_compose(std::string_view in, bool compat, std::string& out, std::vector<int32_t>& scratch) {
  out.clear();
  if (std::all_of(in.begin(), in.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    out.assign(in);  // ASCII is in every normal form
    return;
  }
  const auto options =
      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(in.data());
  const auto len = static_cast<utf8proc_ssize_t>(in.size());
  if (scratch.size() < in.size()) scratch.resize(in.size());
  auto* cps = reinterpret_cast<utf8proc_int32_t*>(scratch.data());
  utf8proc_ssize_t n = 0;
  while ((n = utf8proc_decompose(bytes, len, cps, static_cast<utf8proc_ssize_t>(scratch.size()), options)) >
         static_cast<utf8proc_ssize_t>(scratch.size())) {
    scratch.resize(static_cast<size_t>(n));
    cps = reinterpret_cast<utf8proc_int32_t*>(scratch.data());
  }
  RLX_CHECK(n >= 0, "Unicode normalization: ", utf8proc_errmsg(n));
  n = utf8proc_normalize_utf32(cps, n, options);
  RLX_CHECK(n >= 0, "Unicode normalization: ", utf8proc_errmsg(n));
  for (utf8proc_ssize_t i = 0; i < n; ++i) utf8::append(out, static_cast<char32_t>(cps[static_cast<size_t>(i)]));
}

}  // namespace rlx::detail
