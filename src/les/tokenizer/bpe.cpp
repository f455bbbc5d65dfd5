// Byte-level BPE merges for one pre-tokenized word. Merge order: lowest merge rank first, ties
// broken by the leftmost pair, re-evaluating neighbours after each merge — the same order as
// llama.cpp's llm_tokenizer_bpe_session (a stale queue entry is one whose symbols changed).
#include <algorithm>
#include <cstdio>
#include <queue>

#include "les/tokenizer/tokenizer_impl.h"
#include "les/tokenizer/unicode.h"

namespace les::tok {
namespace {

struct Symbol {
  uint32_t start;  // byte offset in the word
  uint32_t len;    // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t left_len;
  uint32_t right_len;
};

struct BigramLater {  // priority_queue comparator: true if a comes out after b
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void bpe_encode_word(const VocabIndex& v, std::string_view word, bool ignore_merges,
                     bool byte_encode, std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = lookup(v.token_to_id, word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n =
        std::min(word.size() - off, unicode::utf8_len(static_cast<uint8_t>(word[off])));
    const int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(n), idx - 1,
                    off + n == word.size() ? -1 : idx + 1});
    off += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLater> queue;
  std::string key;
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[right];
    key.assign(word.substr(l.start, l.len));
    key.push_back(' ');
    key.append(word.substr(r.start, r.len));
    const int32_t rank = lookup(v.merge_rank, key);
    if (rank < 0) return;
    queue.push({rank, left, right, l.len, r.len});
  };

  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[b.left];
    Symbol& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.len != b.left_len || r.len != b.right_len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    add_bigram(l.prev, b.left);
    add_bigram(b.left, l.next);
  }

  for (const Symbol& s : syms) {
    if (s.len == 0) continue;
    const std::string_view piece = word.substr(s.start, s.len);
    const int32_t id = lookup(v.token_to_id, piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Unknown piece: one token per byte where such a token exists, else the byte is dropped
    // (llama.cpp behaviour).
    for (char ch : piece) {
      int32_t bid;
      if (byte_encode) {
        bid = lookup(v.token_to_id, std::string_view(&ch, 1));
      } else {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(ch)));
        bid = lookup(v.token_to_id, buf);
      }
      if (bid >= 0) out.push_back(bid);
    }
  }
}

}  // namespace les::tok
