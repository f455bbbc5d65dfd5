#include "les/convert/quantize_model.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <vector>

#include "les/model/model.h"
#include "les/quant/kernels.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"

namespace les {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// llama.cpp's fallback when the row length is not a multiple of the block.
Type fallback(Type t) {
  switch (t) {
    case Type::IQ1_S: case Type::IQ1_M: case Type::IQ2_XXS: case Type::IQ2_XS: case Type::IQ2_S:
    case Type::IQ3_XXS: case Type::IQ3_S: case Type::IQ4_XS:
      return Type::IQ4_NL;
    case Type::Q2_K: case Type::Q3_K: case Type::TQ1_0: case Type::TQ2_0: return Type::Q4_0;
    case Type::Q4_K: return Type::Q5_0;
    case Type::Q5_K: return Type::Q5_1;
    case Type::Q6_K: return Type::Q8_0;
    default: return Type::F16;
  }
}

// llama.cpp's "more bits" layers of the _M recipes: the first and last eighth and every third
// layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Tensor categories as llama.cpp's recipes see them (by name, first match in this order).
enum class Category { output, token_embd, attn_v, attn_k, attn_q, attn_output, ffn_up, ffn_gate, ffn_down, other };

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::token_embd;
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight")) {
    return Category::attn_v;
  }
  if (contains(name, "attn_k.weight")) return Category::attn_k;
  if (contains(name, "attn_q.weight")) return Category::attn_q;
  if (contains(name, "attn_output.weight")) return Category::attn_output;
  if (contains(name, "ffn_up")) return Category::ffn_up;
  if (contains(name, "ffn_gate")) return Category::ffn_gate;
  if (contains(name, "ffn_down")) return Category::ffn_down;
  return Category::other;
}

bool counted(Category c) {
  return c == Category::attn_v || c == Category::ffn_down || c == Category::ffn_gate || c == Category::ffn_up;
}

// The recipes of 1 to 2.7 bits per weight that share llama.cpp's "very low bit" rules.
bool very_low_bit(Recipe r) {
  return r == Recipe::iq2_xxs || r == Recipe::iq2_xs || r == Recipe::iq1_s || r == Recipe::iq2_s || r == Recipe::iq2_m ||
         r == Recipe::iq1_m;
}

// The layer a per-layer rule reads for `name`: its block number in a MoE model (llama.cpp parses
// the name there), else the tensor's index among the tensors of its kind.
int rule_layer(const QuantizePlan& p, const std::string& name) {
  if (p.n_expert <= 1) {
    if (auto it = p.kind_index.find(name); it != p.kind_index.end()) return it->second;
  }
  return std::max(0, tensor_block(name));
}

// The recipe's choice for a quantized tensor of shape ne before fallbacks: llama.cpp's rules
// (llama_tensor_get_type) for the ftypes les supports, less those of architectures les does not
// run (Falcon, Llama-2-70B).
Type recipe_type(const QuantizePlan& p, const std::string& name, const std::vector<int64_t>& ne, int n_layer) {
  const Recipe r = p.recipe;
  const Category cat = category_of(name);
  const int64_t row_len = ne[0];
  Type t = p.base;
  if (r == Recipe::pure) return t;
  const bool iq4 = r == Recipe::legacy && (p.base == Type::IQ4_NL || p.base == Type::IQ4_XS);
  const bool iq2_s_m = r == Recipe::iq2_s || r == Recipe::iq2_m;
  const int n = n_layer;
  if (cat == Category::output || (p.tied_embeddings && cat == Category::token_embd)) {
    if (r == Recipe::mxfp4_moe || row_len % block_size(t) != 0) return Type::Q8_0;
    if (very_low_bit(r) || r == Recipe::iq3_xxs) return Type::Q5_K;
    return t == Type::Q8_0 ? t : Type::Q6_K;
  }
  if (r == Recipe::mxfp4_moe) {  // expert stacks MXFP4, every other matrix Q8_0
    return ne.size() > 2 && ne[2] > 1 ? Type::MXFP4 : Type::Q8_0;
  }
  if (cat == Category::token_embd) {
    if (r == Recipe::iq2_xxs || r == Recipe::iq2_xs || r == Recipe::iq1_s || r == Recipe::iq1_m) return Type::Q2_K;
    if (iq2_s_m || r == Recipe::iq3_xxs) return Type::IQ3_S;
    if (r == Recipe::tq1_0 || r == Recipe::tq2_0) return Type::Q4_K;
    return t;
  }
  if (very_low_bit(r)) {
    if (cat == Category::attn_v) {
      if (p.n_gqa >= 4 || p.n_expert >= 4) return Type::Q4_K;
      return iq2_s_m ? Type::IQ3_S : Type::Q2_K;
    }
    if (cat == Category::attn_k && p.n_expert == 8) return Type::Q4_K;
    if (cat == Category::ffn_down) {
      // llama.cpp counts the ffn_down matrices here (two a layer with a shared expert) against
      // the layer count.
      auto it = p.kind_index.find(name);
      const int i = it != p.kind_index.end() ? it->second : std::max(0, tensor_block(name));
      if (i < n / 8) return iq2_s_m ? Type::IQ3_S : Type::Q2_K;
      return t;
    }
    if (cat == Category::attn_output) {
      if (p.n_expert == 8) return Type::Q5_K;
      if (r == Recipe::iq1_s || r == Recipe::iq1_m) return Type::IQ2_XXS;
      if (iq2_s_m) return Type::IQ3_S;
    }
    return t;
  }
  if (cat == Category::attn_v) {
    auto it = p.kind_index.find(name);
    const int i = it != p.kind_index.end() ? it->second : std::max(0, tensor_block(name));
    const int nv = p.n_attn_v > 0 ? p.n_attn_v : n_layer;
    if (r == Recipe::q2_k) t = p.n_gqa >= 4 ? Type::Q4_K : Type::Q3_K;
    else if (r == Recipe::q2_k_s && p.n_gqa >= 4) t = Type::Q4_K;
    else if (r == Recipe::iq3_xxs) t = p.n_gqa >= 4 ? Type::Q4_K : !p.has_imatrix ? Type::IQ3_S : Type::IQ3_XXS;
    else if ((r == Recipe::iq3_xs || r == Recipe::iq3_s) && p.n_gqa >= 4) t = Type::Q4_K;
    else if (r == Recipe::iq3_m) t = Type::Q4_K;
    else if (r == Recipe::q3_k_m) t = i < 2 ? Type::Q5_K : Type::Q4_K;
    else if (r == Recipe::q3_k_l) t = Type::Q5_K;
    else if (iq4 && p.n_gqa >= 4) t = Type::Q5_K;
    else if ((r == Recipe::q4_k_m || r == Recipe::q5_k_m) && use_more_bits(i, nv)) t = Type::Q6_K;
    else if (r == Recipe::q4_k_s && i < 4) t = Type::Q5_K;
    if (p.n_expert == 8) t = Type::Q8_0;
    return t;
  }
  if (cat == Category::attn_k) {
    if (p.n_expert == 8) return Type::Q8_0;
    if (r == Recipe::iq3_xs) return Type::IQ3_XXS;
    if (r == Recipe::iq3_xxs) return Type::IQ2_S;
    return t;
  }
  if (cat == Category::attn_q) {
    if (r == Recipe::iq3_xs) return Type::IQ3_XXS;
    if (r == Recipe::iq3_xxs) return Type::IQ2_S;
    return t;
  }
  if (cat == Category::ffn_down) {
    const int i = rule_layer(p, name);
    if (r == Recipe::q2_k) t = Type::Q3_K;
    else if (r == Recipe::q2_k_s) { if (i < n / 8) t = Type::Q4_K; }
    else if (r == Recipe::iq3_xxs && !p.has_imatrix) t = i < n / 8 ? Type::Q4_K : Type::Q3_K;
    else if (r == Recipe::q3_k_m) t = i < n / 16 ? Type::Q5_K : Type::Q4_K;
    else if (r == Recipe::iq3_m && (i < n / 8 || (p.n_expert == 8 && use_more_bits(i, n)))) t = Type::Q4_K;
    else if (r == Recipe::q3_k_l) t = Type::Q5_K;
    else if (r == Recipe::q4_k_m) { if (use_more_bits(i, n)) t = Type::Q6_K; }
    else if (i < n / 8 && iq4 && !p.has_imatrix) t = Type::Q5_K;
    else if (r == Recipe::q5_k_m && use_more_bits(i, n)) t = Type::Q6_K;
    else if (r == Recipe::q4_k_s && i < n / 8) t = Type::Q5_K;
    else if (r == Recipe::legacy && (p.base == Type::Q4_0 || p.base == Type::Q5_0) && p.has_imatrix && i < n / 8) {
      t = p.base == Type::Q4_0 ? Type::Q4_1 : Type::Q5_1;
    }
    return t;
  }
  if (cat == Category::attn_output) {
    if (p.n_expert == 8) {
      if (r == Recipe::q2_k || r == Recipe::iq3_xs || r == Recipe::iq3_xxs || r == Recipe::q3_k_s ||
          r == Recipe::q3_k_m || r == Recipe::q4_k_s || r == Recipe::q4_k_m || r == Recipe::iq3_s ||
          r == Recipe::iq3_m || iq4) {
        t = Type::Q5_K;
      }
    } else if (r == Recipe::q2_k) {
      t = Type::Q3_K;
    } else if (r == Recipe::iq3_xxs) {
      t = Type::IQ3_S;
    } else if (r == Recipe::q3_k_m || r == Recipe::iq3_m) {
      t = Type::Q4_K;
    } else if (r == Recipe::q3_k_l) {
      t = Type::Q5_K;
    }
    return t;
  }
  if ((cat == Category::ffn_gate || cat == Category::ffn_up) && r == Recipe::iq3_xs) {
    const int i = rule_layer(p, name);
    if (i >= n / 8 && i < 7 * n / 8) t = Type::IQ3_XXS;
  }
  return t;
}

// Tensors that are never converted (llama.cpp's rules): vectors, routers, conv kernels, norms.
bool keeps_type(const std::string& name, const std::vector<int64_t>& ne) {
  size_t dims = ne.size();
  while (dims > 1 && ne[dims - 1] == 1) --dims;
  if (dims < 2) return true;
  if (!ends_with(name, "weight")) return true;
  return read_as_floats(name) || contains(name, "ffn_gate_inp");
}

}  // namespace

bool quantizer_needs_importance(Type t) {
  return t == Type::IQ1_S || t == Type::IQ1_M || t == Type::IQ2_XXS || t == Type::IQ2_XS || t == Type::IQ2_S ||
         t == Type::IQ3_XXS;
}

bool read_as_floats(const std::string& name) { return contains(name, "_norm.weight") || contains(name, "ssm_conv1d"); }

QuantizePlan parse_quantize_plan(const std::string& name) {
  std::string n = name;
  for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool upper = std::any_of(name.begin(), name.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); }) &&
                     std::none_of(name.begin(), name.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); });
  struct Named { const char* name; Type base; Recipe recipe; };
  // Recipes whose names are no type names: any case.
  static const Named kRecipes[] = {
      {"q2_k_s", Type::Q2_K, Recipe::q2_k_s},
      {"q3_k_s", Type::Q3_K, Recipe::q3_k_s}, {"q3_k_m", Type::Q3_K, Recipe::q3_k_m},
      {"q3_k_l", Type::Q3_K, Recipe::q3_k_l}, {"q4_k_s", Type::Q4_K, Recipe::q4_k_s},
      {"q4_k_m", Type::Q4_K, Recipe::q4_k_m}, {"q5_k_s", Type::Q5_K, Recipe::q5_k_s},
      {"q5_k_m", Type::Q5_K, Recipe::q5_k_m}, {"iq2_m", Type::IQ2_S, Recipe::iq2_m},
      {"iq3_xs", Type::IQ3_S, Recipe::iq3_xs}, {"iq3_m", Type::IQ3_S, Recipe::iq3_m},
      {"mxfp4_moe", Type::MXFP4, Recipe::mxfp4_moe},
  };
  QuantizePlan p;
  for (const Named& r : kRecipes) {
    if (n == r.name) {
      p.base = r.base;
      p.recipe = r.recipe;
      return p;
    }
  }
  auto t = parse_type(n);
  if (!t || !info(*t).weight_type || *t == Type::Q8_K || *t == Type::Q8_1) {
    throw Error(strfmt("unknown or unsupported target '%s' (a type such as q4_K, iq4_xs, iq2_xxs, q8_0, f16; a recipe "
                       "such as q4_k_m, Q3_K_S, iq2_m, IQ3_XS, mxfp4_moe; or a llama.cpp ftype name in upper case such "
                       "as Q2_K, IQ2_XXS)", name.c_str()));
  }
  p.base = *t;
  if (upper) {  // llama.cpp's ftype of that name
    switch (*t) {
      case Type::Q2_K: p.recipe = Recipe::q2_k; break;
      case Type::Q3_K: p.recipe = Recipe::q3_k_m; break;  // llama-quantize has no plain Q3_K; Q3_K means Q3_K_M
      case Type::Q4_K: p.recipe = Recipe::q4_k_m; break;  // likewise
      case Type::Q5_K: p.recipe = Recipe::q5_k_m; break;
      case Type::Q6_K: p.recipe = Recipe::q6_k; break;
      case Type::Q4_0: case Type::Q4_1: case Type::Q5_0: case Type::Q5_1: case Type::Q8_0: case Type::IQ4_NL:
      case Type::IQ4_XS:
        p.recipe = Recipe::legacy;
        break;
      case Type::IQ1_S: p.recipe = Recipe::iq1_s; break;
      case Type::IQ1_M: p.recipe = Recipe::iq1_m; break;
      case Type::IQ2_XXS: p.recipe = Recipe::iq2_xxs; break;
      case Type::IQ2_XS: p.recipe = Recipe::iq2_xs; break;
      case Type::IQ2_S: p.recipe = Recipe::iq2_s; p.base = Type::IQ2_XS; break;  // llama.cpp's IQ2_S file is IQ2_XS
      case Type::IQ3_XXS: p.recipe = Recipe::iq3_xxs; break;
      case Type::IQ3_S: p.recipe = Recipe::iq3_s; break;
      case Type::TQ1_0: p.recipe = Recipe::tq1_0; break;
      case Type::TQ2_0: p.recipe = Recipe::tq2_0; break;
      default: break;  // F16, BF16, F32, MXFP4, NVFP4: every matrix converted
    }
  }
  return p;
}

namespace {

// llama-quantize's tensor order: by block number (tensors outside blocks first), then by name.
bool llama_order(const std::string& a, const std::string& b) {
  const int la = tensor_block(a), lb = tensor_block(b);
  if (la != lb) return la < lb;
  return a < b;
}

// head_count_kv may be one number or one per layer (hybrid models: 0 for recurrent layers);
// llama.cpp's recipes read layer 0's.
int64_t layer0_int(const gguf::File& f, const std::string& key, int64_t def) {
  const gguf::Value* v = f.find(key);
  if (!v) return def;
  if (v->type == gguf::ValueType::ARRAY) return v->arr.empty() ? def : v->arr[0].as_int(key);
  return v->as_int(key);
}

}  // namespace

void prepare_plan(QuantizePlan& plan, const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture", "");
  const int64_t n_head = layer0_int(f, arch + ".attention.head_count", 1);
  const int64_t n_head_kv = layer0_int(f, arch + ".attention.head_count_kv", n_head);
  plan.n_gqa = n_head_kv > 0 ? static_cast<int>(n_head / n_head_kv) : 0;
  plan.n_expert = static_cast<int>(f.get_int(arch + ".expert_count", 0));
  plan.kind_index.clear();
  plan.n_attn_v = 0;
  std::vector<std::string> names;
  for (const auto& t : f.tensors) {
    if (counted(category_of(t.name)) && !keeps_type(t.name, t.ne)) names.push_back(t.name);
  }
  std::sort(names.begin(), names.end(), llama_order);
  std::map<Category, int> next;
  for (const auto& name : names) plan.kind_index[name] = next[category_of(name)]++;
  plan.n_attn_v = next[Category::attn_v];
  plan.tied_embeddings = f.find_tensor("output.weight") == nullptr;
}

bool needs_importance(const QuantizePlan& plan, const std::string& name, Type t) {
  const Category cat = category_of(name);
  if (cat == Category::output || cat == Category::token_embd) return false;
  return quantizer_needs_importance(t) || (t == Type::Q2_K && plan.recipe == Recipe::q2_k_s);
}

std::string first_tensor_needing_importance(const QuantizePlan& plan_in, const gguf::File& f) {
  QuantizePlan plan = plan_in;
  prepare_plan(plan, f);
  const std::string arch = f.get_string("general.architecture", "");
  const int n_layer = static_cast<int>(f.get_int(arch + ".block_count", 0));
  for (const auto& t : f.tensors) {
    const Type dst = planned_type(plan, t.name, t.ne, t.type, n_layer);
    if (dst != t.type && needs_importance(plan, t.name, dst)) return t.name;
  }
  return "";
}

uint32_t plan_file_type(const QuantizePlan& p) {
  switch (p.recipe) {
    case Recipe::q2_k: return 10;
    case Recipe::q3_k_s: return 11;
    case Recipe::q3_k_m: return 12;
    case Recipe::q3_k_l: return 13;
    case Recipe::q4_k_s: return 14;
    case Recipe::q4_k_m: return 15;
    case Recipe::q5_k_s: return 16;
    case Recipe::q5_k_m: return 17;
    case Recipe::q6_k: return 18;
    case Recipe::iq2_xxs: return 19;
    case Recipe::iq2_xs: return 20;
    case Recipe::q2_k_s: return 21;
    case Recipe::iq3_xs: return 22;
    case Recipe::iq3_xxs: return 23;
    case Recipe::iq1_s: return 24;
    case Recipe::iq3_s: return 26;
    case Recipe::iq3_m: return 27;
    case Recipe::iq2_s: return 28;
    case Recipe::iq2_m: return 29;
    case Recipe::iq1_m: return 31;
    case Recipe::tq1_0: return 36;
    case Recipe::tq2_0: return 37;
    case Recipe::mxfp4_moe: return 38;
    case Recipe::pure: case Recipe::legacy: break;
  }
  switch (p.base) {  // a pure file: llama.cpp's ftype for a file of mostly this type
    case Type::F32: return 0;
    case Type::F16: return 1;
    case Type::Q4_0: return 2;
    case Type::Q4_1: return 3;
    case Type::Q8_0: return 7;
    case Type::Q5_0: return 8;
    case Type::Q5_1: return 9;
    case Type::Q2_K: return 10;
    case Type::Q3_K: return 11;
    case Type::Q4_K: return 14;
    case Type::Q5_K: return 16;
    case Type::Q6_K: return 18;
    case Type::IQ2_XXS: return 19;
    case Type::IQ2_XS: return 20;
    case Type::IQ3_XXS: return 23;
    case Type::IQ1_S: return 24;
    case Type::IQ4_NL: return 25;
    case Type::IQ3_S: return 26;
    case Type::IQ2_S: return 28;
    case Type::IQ4_XS: return 30;
    case Type::IQ1_M: return 31;
    case Type::BF16: return 32;
    case Type::TQ1_0: return 36;
    case Type::TQ2_0: return 37;
    case Type::MXFP4: return 38;
    case Type::NVFP4: return 39;
    default: return 0;
  }
}

Type fitting_type(Type t, int64_t row_len) {
  while (row_len % block_size(t) != 0) t = fallback(t);
  return t;
}

Type planned_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& ne, Type src,
                  int n_layer) {
  if (auto it = plan.overrides.find(name); it != plan.overrides.end()) return fitting_type(it->second, ne[0]);
  if (plan.keep_unlisted || keeps_type(name, ne)) return src;
  return fitting_type(recipe_type(plan, name, ne, n_layer), ne[0]);
}

void quantize_weights(QuantMethod method, Type t, const float* x, void* y, int64_t n, const float* importance) {
  if (!importance && quantizer_needs_importance(t)) {  // uniform importance, as llama-quantize gives
    thread_local std::vector<float> ones;             // an expert the calibration never reached
    if (ones.size() < static_cast<size_t>(n)) ones.assign(static_cast<size_t>(n), 1.0f);
    importance = ones.data();
  }
  if (method == QuantMethod::exact) {
    quantize_row_ref(t, x, y, n, importance);
  } else {
    quantize_row_fast(t, x, y, n, importance);
  }
}

void convert_rows(const uint8_t* src, Type src_type, Type dst, const std::vector<int64_t>& ne, int64_t row0,
                  int64_t n_rows, void* out, const std::string& name, const ImportanceFn& importance, ThreadPool& pool,
                  QuantMethod method) {
  const int64_t row_len = ne[0];
  const int64_t rows_per_matrix = ne.size() > 1 ? ne[1] : 1;
  const size_t in_row = row_bytes(src_type, row_len);
  const size_t out_row = row_bytes(dst, row_len);
  pool.parallel_for(n_rows, 4, [&](int, int64_t r0, int64_t r1) {
    std::vector<float> tmp(static_cast<size_t>(row_len)), scratch;
    int cached_matrix = -1;
    const float* imp = nullptr;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t global = row0 + r;
      if (importance) {
        const int m = static_cast<int>(global / rows_per_matrix);
        if (m != cached_matrix) {
          imp = importance(name, m, scratch);
          cached_matrix = m;
        }
      }
      if (r + 1 < r1) {  // bring the next row's source into the cache while this one is converted
        const uint8_t* next = src + static_cast<size_t>(r + 1) * in_row;
        for (size_t o = 0; o < in_row; o += 64) __builtin_prefetch(next + o);
      }
      dequantize_row(src_type, src + static_cast<size_t>(r) * in_row, tmp.data(), row_len);
      quantize_weights(method, dst, tmp.data(), static_cast<uint8_t*>(out) + static_cast<size_t>(r) * out_row, row_len,
                       imp);
    }
  });
}

void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizePlan& plan_in,
                    const std::function<void(uint64_t, uint64_t)>& progress, const ImportanceFn& importance) {
  const gguf::File in = gguf::read_file(in_path);
  const MappedFile map = MappedFile::open(in_path);
  const std::string arch = in.get_string("general.architecture", "");
  const int n_layer = static_cast<int>(in.get_int(arch + ".block_count", 0));
  QuantizePlan plan = plan_in;
  prepare_plan(plan, in);
  plan.has_imatrix = plan.has_imatrix || static_cast<bool>(importance);
  for (const auto& t : in.tensors) {  // refused before anything is written, as llama-quantize does
    const Type dst = planned_type(plan, t.name, t.ne, t.type, n_layer);
    if (dst == t.type || !needs_importance(plan, t.name, dst)) continue;
    if (!importance) {
      throw Error(strfmt("%s: tensor %s would be %s, which needs an importance matrix: give one with --imatrix FILE "
                         "(les imatrix or llama-imatrix makes it; llama-quantize refuses this quantization without "
                         "one too)",
                         in_path.c_str(), t.name.c_str(), type_name(dst)));
    }
    const int64_t n_matrices = t.ne.size() > 2 ? t.ne[2] : 1;
    std::vector<float> scratch;
    bool any = false;
    for (int64_t m = 0; m < n_matrices && !any; ++m) any = importance(t.name, static_cast<int>(m), scratch) != nullptr;
    if (!any) {
      throw Error(strfmt("%s: the importance matrix has no data for tensor %s, which needs it to be quantized to %s",
                         in_path.c_str(), t.name.c_str(), type_name(dst)));
    }
  }

  gguf::Writer w;
  w.set_alignment(in.alignment);
  std::map<std::string, bool> extra;
  for (const auto& [k, v] : plan.extra_kv) extra[k] = true;
  for (const auto& [k, v] : in.kv) {
    if (k == "general.file_type" || k == "general.alignment" || k == "general.quantization_version") continue;
    if (extra.count(k)) continue;  // replaced below
    w.add(k, v);
  }
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.file_type", plan_file_type(plan));
  for (const auto& [k, v] : plan.extra_kv) w.add(k, v);

  auto pool = std::make_shared<ThreadPool>(std::max(1, plan.n_threads));
  for (const auto& t : in.tensors) {
    const Type dst = planned_type(plan, t.name, t.ne, t.type, n_layer);
    const uint8_t* src = map.data() + in.data_offset + t.offset;
    if (dst == t.type) {
      w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(src));
      continue;
    }
    const int64_t row_len = t.ne[0];
    const size_t in_row = row_bytes(t.type, row_len);
    const size_t out_row = row_bytes(dst, row_len);
    const Type src_type = t.type;
    const std::vector<int64_t> ne = t.ne;
    const std::string name = t.name;
    const QuantMethod method = plan.method;
    const MappedFile* source = &map;
    // Written in pieces of whole rows: never more than one piece of one tensor in memory.
    w.add_tensor(t.name, t.ne, dst,
                 gguf::Writer::ChunkFillFn([=](void* out, uint64_t offset, uint64_t n_bytes) {
                   LES_ASSERT(offset % out_row == 0 && n_bytes % out_row == 0);
                   const int64_t row0 = static_cast<int64_t>(offset / out_row);
                   const int64_t rows = static_cast<int64_t>(n_bytes / out_row);
                   // Read the source of the next piece (of this tensor or the next one) while
                   // this one is converted.
                   const size_t piece_end = static_cast<size_t>(src - source->data()) +
                                            static_cast<size_t>(row0 + rows) * in_row;
                   source->prefetch(piece_end, static_cast<size_t>(rows) * in_row);
                   convert_rows(src + static_cast<size_t>(row0) * in_row, src_type, dst, ne, row0, rows, out, name,
                                importance, *pool, method);
                 }),
                 out_row);
  }
  w.write(out_path, progress);
}

}  // namespace les
