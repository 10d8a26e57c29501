// Small UTF-8 helpers shared by the tokenizers (internal header).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace rlx::utf8 {

// Length of the sequence a lead byte announces (1 for ASCII and for bytes that
// cannot start a sequence).
inline size_t lead_length(unsigned char c) {
  if (c < 0xC2 || c > 0xF4) return 1;  // ASCII, continuation bytes, C0/C1, F5..FF
  return c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// How many bytes at the start of `s` form a valid UTF-8 sequence: 1–4, or 0
// when the first bytes are not valid (stray continuation byte, overlong form,
// surrogate, > U+10FFFF, or a sequence cut short by the end of `s`).
inline size_t valid_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  if (c < 0xC2 || c > 0xF4) return 0;
  const size_t len = lead_length(c);
  if (s.size() < len) return 0;
  // The second byte's range excludes overlong forms, surrogates and > U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((p[k] & 0xC0) != 0x80) return 0;
  return len;
}

// True when `s` (shorter than its lead byte announces) could still become a
// valid sequence once more bytes arrive.
inline bool is_incomplete_prefix(std::string_view s) {
  if (s.empty() || s.size() >= lead_length(static_cast<unsigned char>(s[0])) ||
      lead_length(static_cast<unsigned char>(s[0])) == 1)
    return false;
  // Pad with the smallest continuation bytes the second-byte rule allows and test.
  std::string padded(s);
  const auto c = static_cast<unsigned char>(s[0]);
  while (padded.size() < lead_length(c)) {
    const bool second = padded.size() == 1;
    padded.push_back(static_cast<char>(second && c == 0xE0 ? 0xA0 : second && c == 0xF0 ? 0x90 : 0x80));
  }
  return valid_length(padded) == padded.size();
}

// Decodes the valid sequence of `len` bytes at `p`.
inline char32_t decode(const unsigned char* p, size_t len) {
  if (len == 1) return p[0];
  char32_t cp = p[0] & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return cp;
}

inline void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first invalid UTF-8 sequence in `s`, or npos.
inline size_t first_invalid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = static_cast<unsigned char>(s[i]) < 0x80 ? 1 : valid_length(s.substr(i));
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

// The code point of the valid `len`-byte sequence at byte i of `s`.
inline char32_t char_at(std::string_view s, size_t i, size_t len) {
  return decode(reinterpret_cast<const unsigned char*>(s.data()) + i, len);
}

// Unicode White_Space (Rust's char::is_whitespace, which the tokenizers
// library's splits and added tokens' lstrip/rstrip test).
constexpr bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace rlx::utf8
