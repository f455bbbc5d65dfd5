// Vocab from GGUF metadata (tokenizer.* keys), with the same key set and defaults as llama.cpp.
#include <limits>

#include "les/gguf/gguf.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

namespace les {
namespace {

using gguf::Value;
using gguf::ValueType;

const Value& array_of(const Value& v, std::string_view key, const char* what, bool (*ok)(ValueType)) {
  if (v.type != ValueType::ARRAY || !ok(v.elem_type)) {
    throw Error(strfmt("%.*s: expected an array of %s, got %s%s%s", static_cast<int>(key.size()),
                       key.data(), what, gguf::value_type_name(v.type),
                       v.type == ValueType::ARRAY ? " of " : "",
                       v.type == ValueType::ARRAY ? gguf::value_type_name(v.elem_type) : ""));
  }
  return v;
}

bool is_string_type(ValueType t) { return t == ValueType::STRING; }
bool is_int_type(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}
bool is_number_type(ValueType t) {
  return is_int_type(t) || t == ValueType::FLOAT32 || t == ValueType::FLOAT64;
}

std::vector<std::string> string_array(const gguf::File& f, std::string_view key) {
  const Value& v = array_of(f.get(key), key, "strings", is_string_type);
  std::vector<std::string> out;
  out.reserve(v.arr.size());
  for (const Value& e : v.arr) out.push_back(e.as_string(key));
  return out;
}

void check_len(std::string_view key, size_t got, size_t n_tokens) {
  if (got < n_tokens) {
    throw Error(strfmt("%.*s: %zu entries for %zu tokens", static_cast<int>(key.size()), key.data(),
                       got, n_tokens));
  }
}

// Special token id: absent -> -1; outside [0, n_tokens) -> -1 as well (llama.cpp then keeps its
// default id); a non-integer value is an error.
int32_t token_id(const gguf::File& f, std::string_view key, size_t n_tokens) {
  const Value* v = f.find(key);
  if (!v) return -1;
  if (!v->is_int() || v->type == ValueType::BOOL) {
    throw Error(strfmt("%.*s: expected an integer token id, got %s", static_cast<int>(key.size()),
                       key.data(), gguf::value_type_name(v->type)));
  }
  const bool neg = (v->type == ValueType::INT8 || v->type == ValueType::INT16 ||
                    v->type == ValueType::INT32 || v->type == ValueType::INT64) && v->i64 < 0;
  if (neg) return -1;
  const uint64_t id = v->as_uint(key);
  return id < n_tokens ? static_cast<int32_t>(id) : -1;
}

std::optional<bool> opt_bool(const gguf::File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) return std::nullopt;
  return v->as_bool(key);
}

std::string opt_string(const gguf::File& f, std::string_view key) {
  const Value* v = f.find(key);
  return v ? v->as_string(key) : std::string();
}

}  // namespace

Vocab vocab_from_gguf(const gguf::File& f) {
  Vocab v;
  v.model = f.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  v.pre = opt_string(f, "tokenizer.ggml.pre");
  v.tokens = string_array(f, "tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) throw Error("tokenizer.ggml.tokens: empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error("tokenizer.ggml.tokens: too many tokens");
  }

  if (const Value* tt = f.find("tokenizer.ggml.token_type")) {
    const char* key = "tokenizer.ggml.token_type";
    array_of(*tt, key, "integers", is_int_type);
    check_len(key, tt->arr.size(), n);
    v.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = tt->arr[i].as_int(key);
      v.token_types.push_back(t >= 0 && t <= 6 ? static_cast<int32_t>(t) : 0);
    }
  }
  if (const Value* sc = f.find("tokenizer.ggml.scores")) {
    const char* key = "tokenizer.ggml.scores";
    array_of(*sc, key, "numbers", is_number_type);
    check_len(key, sc->arr.size(), n);
    v.scores.reserve(n);
    for (size_t i = 0; i < n; ++i) v.scores.push_back(static_cast<float>(sc->arr[i].as_float(key)));
  }
  if (f.find("tokenizer.ggml.merges")) {
    v.merges = string_array(f, "tokenizer.ggml.merges");
  } else if (v.model == "gpt2" && v.pre != "kimi-k2") {  // llama.cpp lets Kimi-K2 go without
    throw Error("tokenizer.ggml.merges: missing (required for a gpt2 BPE vocabulary)");
  }

  v.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", n);
  v.eot_id = token_id(f, "tokenizer.ggml.eot_token_id", n);
  v.eom_id = token_id(f, "tokenizer.ggml.eom_token_id", n);
  v.unk_id = token_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.sep_id = token_id(f, "tokenizer.ggml.seperator_token_id", n);
  v.pad_id = token_id(f, "tokenizer.ggml.padding_token_id", n);
  v.mask_id = token_id(f, "tokenizer.ggml.mask_token_id", n);
  v.fim_pre_id = token_id(f, "tokenizer.ggml.fim_pre_token_id", n);
  v.fim_suf_id = token_id(f, "tokenizer.ggml.fim_suf_token_id", n);
  v.fim_mid_id = token_id(f, "tokenizer.ggml.fim_mid_token_id", n);
  v.fim_pad_id = token_id(f, "tokenizer.ggml.fim_pad_token_id", n);
  v.fim_rep_id = token_id(f, "tokenizer.ggml.fim_rep_token_id", n);
  v.fim_sep_id = token_id(f, "tokenizer.ggml.fim_sep_token_id", n);
  // deprecated spellings, read after the new ones as llama.cpp does
  if (int32_t id = token_id(f, "tokenizer.ggml.prefix_token_id", n); id >= 0) v.fim_pre_id = id;
  if (int32_t id = token_id(f, "tokenizer.ggml.suffix_token_id", n); id >= 0) v.fim_suf_id = id;
  if (int32_t id = token_id(f, "tokenizer.ggml.middle_token_id", n); id >= 0) v.fim_mid_id = id;

  v.add_bos = opt_bool(f, "tokenizer.ggml.add_bos_token");
  v.add_eos = opt_bool(f, "tokenizer.ggml.add_eos_token");
  v.add_space_prefix = opt_bool(f, "tokenizer.ggml.add_space_prefix");
  v.chat_template = opt_string(f, "tokenizer.chat_template");
  v.name = opt_string(f, "general.name");
  return v;
}

}  // namespace les
