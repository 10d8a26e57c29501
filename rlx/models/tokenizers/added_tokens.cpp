#include "rlx/models/tokenizers/added_tokens.h"

#include <algorithm>

#include "rlx/models/tokenizers/utf8.h"

namespace rlx::detail {
namespace {

// Start of the whitespace run that ends at `end`.
size_t whitespace_before(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!utf8::is_white_space(utf8::char_at(text, start, end - start))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
size_t whitespace_after(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    const size_t len = utf8::lead_length(static_cast<unsigned char>(text[begin]));
    if (!utf8::is_white_space(utf8::char_at(text, begin, len))) break;
    begin += len;
  }
  return begin;
}

}  // namespace

void AddedTokenMatcher::add(Token t) {
  starts_[static_cast<unsigned char>(t.content[0])] = true;
  tokens_.push_back(std::move(t));
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextPiece>& out) const {
  out.clear();
  size_t done = 0;  // end of the previous piece
  for (size_t i = 0; i < text.size() && !tokens_.empty();) {
    const Token* t = starts_[static_cast<unsigned char>(text[i])] ? longest_at(text, i) : nullptr;
    if (!t) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + t->content.size();
    if (t->lstrip) begin = std::max(done, whitespace_before(text, begin));
    if (t->rstrip) end = whitespace_after(text, end);
    if (done < begin) out.push_back({done, begin, -1});
    out.push_back({begin, end, t->id});
    done = end;
    i += t->content.size();  // the library searches on from the match itself, not its widened end
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

const AddedTokenMatcher::Token* AddedTokenMatcher::longest_at(std::string_view text, size_t i) const {
  const Token* best = nullptr;
  for (const Token& t : tokens_)
    if ((!best || t.content.size() > best->content.size()) && text.compare(i, t.content.size(), t.content) == 0)
      best = &t;
  return best;
}

}  // namespace rlx::detail
