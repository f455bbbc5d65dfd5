// Tokenizer: vocabulary set-up (llama.cpp's llama_vocab::impl::load rules), special-token
// partitioning, encode, token_to_piece and decode.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "les/tokenizer/pretokenize.h"
#include "les/tokenizer/tokenizer.h"
#include "les/tokenizer/tokenizer_impl.h"
#include "les/tokenizer/unicode.h"
#include "les/util/error.h"

namespace les {

using tok::SplitRule;

namespace {

const char* const kSpaceEscape = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

struct PreSpec {
  std::vector<SplitRule> rules;
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
  bool no_default_bos = false;
};

bool name_in(std::string_view s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

// tokenizer.ggml.pre -> pre-tokenizer settings (llama.cpp's pre-type table, the supported part).
PreSpec resolve_pre(const std::string& pre) {
  using R = SplitRule;
  PreSpec p;
  if (pre.empty() || pre == "default") {
    p.rules = {R::kPunctRuns, R::kGpt2, R::kNumberRuns, R::kDigits3};
  } else if (name_in(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"})) {
    p.rules = {R::kLlama3};
    p.ignore_merges = true;
    p.add_bos = true;
  } else if (name_in(pre, {"dbrx", "smaug-bpe"})) {
    p.rules = {R::kLlama3};
  } else if (name_in(pre, {"chatglm-bpe", "glm4"})) {
    p.rules = {R::kLlama3};
    p.no_default_bos = true;
  } else if (name_in(pre, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                           "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4",
                           "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"})) {
    p.rules = {R::kGpt2};
  } else if (name_in(pre, {"trillion", "granite-docling"})) {
    p.rules = {R::kGpt2};
    p.clean_spaces = false;
  } else if (name_in(pre, {"starcoder", "refact", "codeshell", "exaone", "minerva-7b",
                           "mellum2"})) {
    p.rules = {R::kEachNumber, R::kGpt2};
  } else if (name_in(pre, {"command-r", "smollm"})) {
    p.rules = {R::kEachNumber, R::kGpt2};
    p.clean_spaces = false;
  } else if (pre == "falcon") {
    p.rules = {R::kPunctRunsBacktick, R::kGpt2, R::kDigits3};
  } else if (name_in(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan",
                           "solar-open", "grok-2"})) {
    p.rules = {R::kQwen2};
    p.clean_spaces = false;
  } else if (name_in(pre, {"stablelm2", "megrez"})) {
    p.rules = {R::kQwen2};
  } else if (pre == "qwen35") {
    p.rules = {R::kQwen35};
    p.clean_spaces = false;
  } else if (name_in(pre, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    p.rules = {R::kGpt4o};
    p.clean_spaces = false;
  } else if (pre == "kimi-k2") {
    p.rules = {R::kKimiK2};
    p.clean_spaces = false;
  } else if (name_in(pre, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    p.rules = {R::kNumbers3, R::kCjkKana, R::kDeepseekV3};
    p.clean_spaces = false;
  } else if (pre == "deepseek-llm") {
    p.rules = {R::kEachNewline, R::kDeepseekLetters, R::kDeepseekPunct, R::kTrailingSpace,
               R::kCjkHangul, R::kNumberRuns};
    p.clean_spaces = false;
  } else if (pre == "deepseek-coder") {
    p.rules = {R::kEachNewline, R::kSpaceLetters, R::kSpacePunct, R::kCjkHangul, R::kEachNumber};
    p.clean_spaces = false;
  } else {
    throw Error(strfmt("tokenizer.ggml.pre: unsupported pre-tokenizer '%s'", pre.c_str()));
  }
  return p;
}

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// Text of a "normal" byte-level BPE token: each code point is one byte.
std::string decode_bpe_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : unicode::decode_utf8(text)) {
    const int b = unicode::bpe_cp_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (char c : unicode::encode_utf8(cp)) {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
      out += hex;
    }
    out += text + "]";
  }
  return out;
}

int hex_byte(const std::string& text) {  // "<0xAB>" -> 0xAB, as strtol(text.substr(3, 2), 16)
  if (text.size() < 4) return -1;
  const std::string digits = text.substr(3, 2);
  return static_cast<int>(std::strtol(digits.c_str(), nullptr, 16) & 0xFF);
}

// llama_detokenize's clean_spaces post-processing, in place, as there.
void clean_spaces(std::string& s) {
  char* text = s.data();
  const int32_t n = static_cast<int32_t>(s.size());
  int32_t total = n;
  // " ?", " !", " .", " ,"
  const int32_t total1 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    text[total++] = x;
  }
  // " ' " -> "'"
  const int32_t total2 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      total--;
      text[++i] = '\0';
    }
    text[total++] = x;
  }
  // " 's", " 'm", " 're", " 've" -> without the space
  const int32_t total3 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    text[total++] = x;
  }
  s.resize(static_cast<size_t>(total));
}

}  // namespace

struct Tokenizer::Impl {
  Vocab v;
  bool spm = false;
  std::vector<SplitRule> rules;
  bool ignore_merges = false;
  bool clean_spaces = false;
  bool add_space_prefix = false;
  bool add_bos = false;
  bool add_eos = false;
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::vector<uint32_t> attrs;
  tok::VocabIndex idx;
  std::vector<int32_t> special_cache;  // control/user-defined/unknown tokens, longest first
  std::vector<std::string> pieces;     // token_to_piece(id, special = true)
  std::vector<int32_t> eog;            // sorted
  std::vector<uint8_t> is_eog;

  int32_t n() const { return static_cast<int32_t>(v.tokens.size()); }
  int32_t find(std::string_view s) const { return tok::lookup(idx.token_to_id, s); }
  void check_id(int32_t id) const {
    if (id < 0 || id >= n()) throw Error(strfmt("tokenizer: token id %d out of range [0, %d)", id, n()));
  }

  void build();
  void detect_special_by_text();
  void build_eog();
  std::string piece_for_cache(int32_t id) const;

  struct Fragment {
    int32_t token;  // -1: raw text [off, off + len)
    size_t off;
    size_t len;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
};

void Tokenizer::Impl::build() {
  const int32_t n_tok = static_cast<int32_t>(v.tokens.size());
  if (n_tok == 0) throw Error("tokenizer.ggml.tokens: empty vocabulary");

  int32_t def_bos = -1, def_eos = -1, def_unk = -1;
  if (v.model == "llama") {
    spm = true;
    def_bos = 1;
    def_eos = 2;
    def_unk = 0;
    add_space_prefix = true;
    clean_spaces = false;
    add_bos = true;
    add_eos = false;
  } else if (v.model == "gpt2") {
    spm = false;
    def_bos = 11;
    def_eos = 11;
    const PreSpec p = resolve_pre(v.pre);
    rules = p.rules;
    ignore_merges = p.ignore_merges;
    clean_spaces = p.clean_spaces;
    add_bos = p.add_bos;
    if (p.no_default_bos) def_bos = -1;
    add_space_prefix = false;
  } else {
    throw Error(strfmt("tokenizer.ggml.model: unsupported tokenizer model '%s' (supported: gpt2, llama)",
                       v.model.c_str()));
  }
  if (v.add_space_prefix) add_space_prefix = *v.add_space_prefix;

  if (!v.token_types.empty() && v.token_types.size() < v.tokens.size()) {
    throw Error(strfmt("tokenizer.ggml.token_type: %zu entries for %zu tokens", v.token_types.size(),
                       v.tokens.size()));
  }
  if (!v.scores.empty() && v.scores.size() < v.tokens.size()) {
    throw Error(strfmt("tokenizer.ggml.scores: %zu entries for %zu tokens", v.scores.size(),
                       v.tokens.size()));
  }

  attrs.assign(n_tok, kAttrNormal);
  idx.scores.assign(n_tok, 0.0f);
  idx.token_to_id.reserve(n_tok);
  for (int32_t i = 0; i < n_tok; ++i) {
    std::string& t = v.tokens[i];
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";
    if (!idx.token_to_id.emplace(t, i).second) {
      throw Error(strfmt("tokenizer.ggml.tokens: duplicate token '%s' at ids %d and %d", t.c_str(),
                         find(t), i));
    }
    if (!v.scores.empty()) idx.scores[i] = v.scores[i];
    if (!v.token_types.empty()) attrs[i] = attr_from_type(v.token_types[i]);
  }

  if (!spm) {
    idx.merge_rank.reserve(v.merges.size());
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& m = v.merges[i];
      if (m.size() < 2 || m.find(' ', 1) == std::string::npos) continue;
      idx.merge_rank.emplace(m, static_cast<int32_t>(i));
    }
  }

  // byte-fallback tokens (SPM): "<0xAB>", else the single byte as a string
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    int32_t id = find(buf);
    if (id < 0) {
      const char c = static_cast<char>(b);
      id = find(std::string_view(&c, 1));
    }
    idx.byte_token[b] = id;
  }

  // special token ids: defaults, then the given ids where in range
  auto pick = [&](int32_t def, int32_t given) {
    if (def >= n_tok) def = -1;
    return (given >= 0 && given < n_tok) ? given : def;
  };
  bos = pick(def_bos, v.bos_id);
  eos = pick(def_eos, v.eos_id);
  unk = pick(def_unk, v.unk_id);
  eot = pick(-1, v.eot_id);
  eom = pick(-1, v.eom_id);
  sep = pick(-1, v.sep_id);
  pad = pick(-1, v.pad_id);
  mask = pick(-1, v.mask_id);
  fim_pre = pick(-1, v.fim_pre_id);
  fim_suf = pick(-1, v.fim_suf_id);
  fim_mid = pick(-1, v.fim_mid_id);
  fim_pad = pick(-1, v.fim_pad_id);
  fim_rep = pick(-1, v.fim_rep_id);
  fim_sep = pick(-1, v.fim_sep_id);
  if (v.add_bos) add_bos = *v.add_bos;
  if (v.add_eos) add_eos = *v.add_eos;

  detect_special_by_text();
  build_eog();

  for (int32_t id = 0; id < n_tok; ++id) {
    if (attrs[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_cache.push_back(id);
  }
  std::stable_sort(special_cache.begin(), special_cache.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });

  pieces.resize(n_tok);
  for (int32_t id = 0; id < n_tok; ++id) pieces[id] = piece_for_cache(id);

  // per-token strip attributes that llama.cpp sets by model/tokenizer name
  std::string lname = v.name;
  for (char& c : lname) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto set_attr = [&](std::string_view text, uint32_t a, bool on) {
    const int32_t id = find(text);
    if (id >= 0) attrs[id] = on ? (attrs[id] | a) : (attrs[id] & ~a);
  };
  if (v.pre.find("jina-v2-de") != std::string::npos || v.pre.find("jina-v2-es") != std::string::npos ||
      v.pre.find("jina-v2-code") != std::string::npos) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
    for (int32_t id : special_cache) attrs[id] |= kAttrRstrip;
    set_attr("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
  } else if (lname.find("modern-bert") != std::string::npos) {
    set_attr("[MASK]", kAttrLstrip, true);
  }
}

// EOT/EOM/FIM tokens found by their text when no id was given; they become control tokens.
void Tokenizer::Impl::detect_special_by_text() {
  auto detect = [&](int32_t& slot, std::initializer_list<const char*> texts) {
    if (slot >= 0) return;
    for (const char* t : texts) {
      const int32_t id = find(t);
      if (id < 0) continue;
      slot = id;
      attrs[id] |= kAttrControl;
      return;
    }
  };
  detect(eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
               "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
               "<end_of_utterance>"});
  detect(eom, {"<|eom_id|>"});
  detect(fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                   "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                   "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
  detect(fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                   "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
                   "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
  detect(fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                   "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                   "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
  detect(fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(fim_sep, {"<|file_sep|>"});
}

void Tokenizer::Impl::build_eog() {
  std::vector<int32_t> ids;
  for (int32_t id : {fim_pad, fim_rep, fim_sep}) {
    if (id >= 0) ids.push_back(id);
  }
  static const char* const kEogTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~["};
  for (const char* t : kEogTexts) {
    const int32_t id = find(t);
    if (id < 0) continue;
    ids.push_back(id);
    attrs[id] |= kAttrControl;
  }
  // gpt-oss: always rendered
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = find(t);
    if (id >= 0) attrs[id] = kAttrUserDefined;
  }
  for (int32_t id : {eos, eot, eom}) {
    if (id >= 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  auto has = [&](const char* t) {
    const int32_t id = find(t);
    return id >= 0 && std::binary_search(ids.begin(), ids.end(), id) ? id : -1;
  };
  auto drop = [&](int32_t id, uint32_t new_attr) {
    ids.erase(std::find(ids.begin(), ids.end(), id));
    attrs[id] = new_attr;
  };
  // o200k_harmony / solar-open: <|end|> is not end of generation there
  const int32_t end_id = has("<|end|>");
  if (end_id >= 0 && ((has("<|return|>") >= 0 && (has("<|call|>") >= 0 || has("<|calls|>") >= 0)) ||
                      ((has("<|call|>") >= 0 || has("<|calls|>") >= 0) && has("<|flush|>") >= 0))) {
    drop(end_id, kAttrUserDefined);
  }
  // gemma4 / paddleocr: </s> is not end of generation next to <|tool_response>
  const int32_t s_id = has("</s>");
  if (s_id >= 0 && has("<|tool_response>") >= 0) drop(s_id, kAttrNormal);

  eog = ids;
  is_eog.assign(v.tokens.size(), 0);
  for (int32_t id : eog) is_eog[id] = 1;
}

std::string Tokenizer::Impl::piece_for_cache(int32_t id) const {
  const std::string& text = v.tokens[id];
  const uint32_t a = attrs[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (a & kAttrNormal) {
    if (spm) {
      std::string r = text;
      replace_all(r, kSpaceEscape, " ");
      return r;
    }
    return decode_bpe_text(text);
  }
  if (a & kAttrByte) {
    const int b = hex_byte(text);
    return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
  }
  return std::string();
}

// Splits the text at occurrences of special tokens, longest token first, as
// llama.cpp's tokenizer_st_partition (so a longer token wins over a shorter one inside it).
std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::partition(std::string_view text,
                                                                   bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t sid : special_cache) {
    const uint32_t a = attrs[sid];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = v.tokens[sid];
    bool any = false;
    for (const Fragment& f : frags) {
      if (f.token < 0 && f.len >= st.size() &&
          text.substr(f.off, f.len).find(st) != std::string_view::npos) {
        any = true;
        break;
      }
    }
    if (!any) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t end = f.off + f.len;
      const std::string_view window = text.substr(0, end);
      size_t pos = f.off;
      while (true) {
        const size_t m = window.find(st, pos);
        if (m == std::string_view::npos) {
          if (end > pos) next.push_back({-1, pos, end - pos});
          break;
        }
        size_t left_len = m - pos;
        if (a & kAttrLstrip) {
          while (left_len > 0 && is_c_space(text[pos + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({-1, pos, left_len});
        next.push_back({sid, 0, 0});
        pos = m + st.size();
        if (a & kAttrRstrip) {
          while (pos < end && is_c_space(text[pos])) ++pos;
        }
      }
    }
    frags.swap(next);
  }
  return frags;
}

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>()) {
  impl_->v = std::move(vocab);
  impl_->build();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Impl::Fragment> frags = m.partition(text, parse_special);

  if (add_special && m.add_bos) {
    if (m.bos < 0) throw Error("tokenizer: vocabulary asks for BOS but has no BOS token");
    out.push_back(m.bos);
  }
  if (m.spm) {
    bool prev_special = true;  // the first fragment gets the space prefix too
    std::string buf;
    for (const auto& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (m.add_space_prefix && prev_special) buf.push_back(' ');
      buf.append(text.substr(f.off, f.len));
      replace_all(buf, " ", kSpaceEscape);
      tok::spm_encode(m.idx, buf, m.unk, out);
      prev_special = false;
    }
  } else {
    for (const auto& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      for (const std::string& word : tok::pretokenize(text.substr(f.off, f.len), m.rules, true)) {
        tok::bpe_encode_word(m.idx, word, m.ignore_merges, /*byte_encode=*/true, out);
      }
    }
  }
  if (add_special && m.add_eos) {
    if (m.eos < 0) throw Error("tokenizer: vocabulary asks for EOS but has no EOS token");
    out.push_back(m.eos);
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  impl_->check_id(id);
  if (!special && (impl_->attrs[id] & (kAttrUnknown | kAttrControl))) return std::string();
  return impl_->pieces[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special,
                              bool remove_special) const {
  const Impl& m = *impl_;
  size_t first = 0;
  size_t last = ids.size();
  bool remove_space = m.add_space_prefix;
  if (remove_special && m.add_bos && last > first && ids[first] == m.bos) {
    remove_space = false;
    ++first;
  }
  if (remove_special && m.add_eos && last > first && ids[last - 1] == m.eos) --last;

  std::string out;
  for (size_t i = first; i < last; ++i) {
    const int32_t id = ids[i];
    m.check_id(id);
    if (special || !(m.attrs[id] & (kAttrUnknown | kAttrControl))) {
      const std::string& p = m.pieces[id];
      const size_t skip = (remove_space && !p.empty() && p[0] == ' ') ? 1 : 0;
      out.append(p, skip, std::string::npos);
    }
    remove_space = false;
  }
  if (m.clean_spaces) clean_spaces(out);
  return out;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  if (impl_->spm) return {};
  return tok::pretokenize(text, impl_->rules, true);
}

int32_t Tokenizer::n_tokens() const { return impl_->n(); }
bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < impl_->n() && impl_->is_eog[id] != 0;
}
bool Tokenizer::is_control(int32_t id) const {
  impl_->check_id(id);
  return (impl_->attrs[id] & kAttrControl) != 0;
}
uint32_t Tokenizer::attr(int32_t id) const {
  impl_->check_id(id);
  return impl_->attrs[id];
}
const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->v.tokens[id];
}
int32_t Tokenizer::find_token(std::string_view text) const { return impl_->find(text); }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::is_spm() const { return impl_->spm; }
const std::string& Tokenizer::pre() const { return impl_->v.pre; }
const Vocab& Tokenizer::vocab() const { return impl_->v; }

}  // namespace les
