// SentencePiece-style BPE ("llama" vocabularies): starting from single UTF-8 characters,
// repeatedly merge the adjacent pair whose concatenation is the vocabulary token with the
// highest score (ties: leftmost), as llama.cpp's llm_tokenizer_spm_session. Pieces that are not
// tokens are re-segmented along the merges that formed them, or emitted as <0xXX> byte tokens.
#include <algorithm>
#include <queue>

#include "les/tokenizer/tokenizer_impl.h"
#include "les/tokenizer/unicode.h"

namespace les::tok {
namespace {

struct SpmSymbol {
  uint32_t start;
  uint32_t len;
  int32_t prev;
  int32_t next;
};

struct SpmBigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;
};

struct SpmBigramLess {  // max-heap on score, ties: smaller left first
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const VocabIndex& v, std::string_view text, int32_t unk)
      : v_(v), text_(text), unk_(unk) {}

  void run(std::vector<int32_t>& out) {
    if (text_.empty()) return;
    for (size_t off = 0; off < text_.size();) {
      const size_t n =
          std::min(text_.size() - off, unicode::utf8_len(static_cast<uint8_t>(text_[off])));
      const int32_t idx = static_cast<int32_t>(syms_.size());
      syms_.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(n), idx - 1,
                       off + n == text_.size() ? -1 : idx + 1});
      off += n;
    }
    for (int32_t i = 1; i < static_cast<int32_t>(syms_.size()); ++i) try_add(i - 1, i);

    while (!queue_.empty()) {
      const SpmBigram b = queue_.top();
      queue_.pop();
      SpmSymbol& l = syms_[b.left];
      SpmSymbol& r = syms_[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int32_t i = 0; i != -1; i = syms_[i].next) resegment(syms_[i], out, 0);
  }

 private:
  std::string_view text_of(const SpmSymbol& s) const { return text_.substr(s.start, s.len); }

  void try_add(int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol& l = syms_[left];
    const std::string_view piece = text_.substr(l.start, l.len + syms_[right].len);
    const int32_t id = lookup(v_.token_to_id, piece);
    if (id < 0) return;
    queue_.push({v_.scores[id], left, right, static_cast<uint32_t>(piece.size())});
    rev_merge_[std::string(piece)] = {left, right};
  }

  void emit_bytes(std::string_view piece, std::vector<int32_t>& out) const {
    for (char ch : piece) {
      const int32_t id = v_.byte_token[static_cast<uint8_t>(ch)];
      if (id >= 0) {
        out.push_back(id);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      }
    }
  }

  void resegment(const SpmSymbol& s, std::vector<int32_t>& out, int depth) const {
    const std::string_view piece = text_of(s);
    if (piece.empty()) return;
    const int32_t id = lookup(v_.token_to_id, piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = rev_merge_.find(piece);
    if (it == rev_merge_.end() || depth > 64) {
      emit_bytes(piece, out);
      return;
    }
    resegment(syms_[it->second.first], out, depth + 1);
    resegment(syms_[it->second.second], out, depth + 1);
  }

  const VocabIndex& v_;
  std::string_view text_;
  int32_t unk_;
  std::vector<SpmSymbol> syms_;
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramLess> queue_;
  std::unordered_map<std::string, std::pair<int32_t, int32_t>, StrHash, std::equal_to<>>
      rev_merge_;
};

}  // namespace

void spm_encode(const VocabIndex& v, std::string_view text, int32_t unk,
                std::vector<int32_t>& out) {
  SpmSession(v, text, unk).run(out);
}

}  // namespace les::tok
