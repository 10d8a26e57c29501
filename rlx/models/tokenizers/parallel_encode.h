// What the sentence tokenizers share (WordPiece, Unigram, byte-level BPE):
// the batch loop, the UTF-8 check and the final encoding (internal header).
#pragma once
#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <thread>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/models/tokenizers/sentence_tokenizer.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx::detail {

// InvalidArgument naming the first invalid byte, unless `text` is valid UTF-8.
inline void require_utf8(std::string_view text, const char* tokenizer) {
  const size_t bad = utf8::first_invalid(text);
  RLX_CHECK(bad == std::string_view::npos, tokenizer, ": invalid UTF-8 at byte offset ", bad, " (byte 0x", std::hex,
            static_cast<unsigned>(static_cast<unsigned char>(text[bad])), ")");
}

// `ids` (cls, then the pieces) cut to `cap` and closed by sep; mask all 1,
// token types all 0 (one sequence).
inline Encoding finish_encoding(std::vector<int32_t> ids, size_t cap, int32_t sep_id) {
  if (ids.size() > cap) ids.resize(cap);
  ids.push_back(sep_id);
  Encoding e;
  e.attention_mask.assign(ids.size(), 1);
  e.token_type_ids.assign(ids.size(), 0);
  e.input_ids = std::move(ids);
  return e;
}

// out[i] = encode(i, scratch) for i < n on up to `num_threads` threads (≤ 0:
// hardware concurrency), one Scratch per thread. An InvalidArgument from text
// i is rethrown naming i, the lowest failing index when several fail.
template <typename Scratch, typename Encode>
std::vector<Encoding> encode_in_parallel(size_t n, int num_threads, Encode&& encode) {
  std::vector<Encoding> out(n);
  size_t threads = num_threads > 0 ? static_cast<size_t>(num_threads) : std::thread::hardware_concurrency();
  threads = std::clamp<size_t>(threads, 1, std::max<size_t>(n, 1));
  // Workers take small blocks in input order from a shared counter, which
  // balances uneven text lengths better than one fixed chunk per thread.
  const size_t block = std::clamp<size_t>(n / (threads * 8), 1, 64);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  struct Failure {
    size_t index = std::numeric_limits<size_t>::max();
    std::exception_ptr error;
  };
  std::vector<Failure> failures(threads);
  auto work = [&](size_t t) {
    size_t i = 0;
    try {
      Scratch s;  // one set of buffers per thread, reused across its texts
      while (!failed.load(std::memory_order_relaxed)) {
        const size_t lo = next.fetch_add(block);
        if (lo >= n) break;
        for (i = lo; i < std::min(n, lo + block); ++i) out[i] = encode(i, s);
      }
    } catch (...) {
      failures[t] = {i, std::current_exception()};
      failed = true;
    }
  };
  if (threads == 1) {
    work(0);
  } else {
    std::vector<std::jthread> pool;
    pool.reserve(threads);
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work, t);
  }
  // Blocks are taken in increasing order and finished once taken, so every
  // text below the lowest recorded failure was encoded: that failure is the first.
  const auto first = std::min_element(failures.begin(), failures.end(),
                                      [](const Failure& a, const Failure& b) { return a.index < b.index; });
  if (first->error) {
    try {
      std::rethrow_exception(first->error);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(str("encode_batch: text ", first->index, ": ", e.what()));
    }
  }
  return out;
}

}  // namespace rlx::detail
