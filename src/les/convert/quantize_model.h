// Converting a model's weight matrices to other tensor types (les quantize, the bundled model,
// mixed precision). Norms, biases and routers keep their types; every other matrix gets the
// type a plan assigns, with llama.cpp's fallbacks when a row length does not fit the block size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/types.h"
#include "les/util/thread_pool.h"

namespace les {

// llama.cpp's quantization recipes ("ftypes"): which tensors get more bits than the base type.
enum class Recipe {
  pure,                 // every matrix gets the base type (fallbacks aside)
  q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k,
  legacy,               // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS: base type, output Q6_K
};

// Which weight quantizer converts rows: quantize_row_fast (the default: ~1/40 of the reference's
// time, weighted error within ~0.3% of it) or quantize_row_ref (les quantize --exact).
enum class QuantMethod { fast, exact };

// Quantizes one row of n weights to t with the chosen quantizer (see kernels.h).
void quantize_weights(QuantMethod method, Type t, const float* x, void* y, int64_t n, const float* importance);

struct QuantizePlan {
  Type base = Type::Q4_K;       // default type of weight matrices
  QuantMethod method = QuantMethod::fast;
  Recipe recipe = Recipe::pure;
  std::map<std::string, Type> overrides;  // exact tensor name -> type (mixed precision plans)
  bool keep_unlisted = false;   // tensors without an override keep their type
  std::vector<std::pair<std::string, gguf::Value>> extra_kv;  // metadata added to the output
  int n_threads = 1;
  // Facts of the model the recipes look at (prepare_plan fills them from the input file; the
  // defaults describe a plain attention model).
  int n_gqa = 1;                // attention heads per KV head
  int n_expert = 0;
  std::map<std::string, int> attn_v_index;  // attn_v / attn_qkv tensor -> its index among them
  int n_attn_v = 0;
  bool tied_embeddings = false; // no output.weight: token_embd is the output head too
  bool has_imatrix = false;     // recipes differ slightly when an importance matrix is used
};

// Parses a target: a type name as llama.cpp spells types ("q4_K", "q8_0", "iq4_xs", "f16": a pure
// file), a recipe name ending in _s/_m/_l ("q4_k_m", "Q3_K_S"), or a llama.cpp ftype name in upper
// case ("Q2_K", "Q6_K", "Q4_0", "IQ4_XS": that ftype's recipe).
QuantizePlan parse_quantize_plan(const std::string& name);
// Fills the plan's model facts from a GGUF file.
void prepare_plan(QuantizePlan& plan, const gguf::File& f);
// llama.cpp's llama_ftype number for general.file_type.
uint32_t plan_file_type(const QuantizePlan& plan);

// The type a plan gives tensor `name` of shape ne (ne[0] = row length) in a model of n_layer
// layers; `src` is the tensor's current type (kept for vectors, routers and conv kernels).
Type planned_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& ne, Type src,
                  int n_layer);
// llama.cpp's fallback for a type whose block does not divide a row (IQ4_XS -> IQ4_NL, Q4_K ->
// Q5_0, ...), applied until the type fits.
Type fitting_type(Type t, int64_t row_len);

// Whether a 2-D weight tensor (its name) is read by the model as plain floats, never through a
// matrix product, so that no conversion touches it (as llama.cpp's quantizer leaves them): a
// DeltaNet layer's convolution taps ([d_conv x channels]) and norm weights.
bool read_as_floats(const std::string& name);

// Importance of each input column for quantizing matrix `expert` (0 for 2-D tensors) of `tensor`:
// [row length] non-negative floats, or nullptr for none. scratch may hold the result.
using ImportanceFn = std::function<const float*(const std::string& tensor, int expert, std::vector<float>& scratch)>;

// Converts the rows [row0, row0 + n_rows) of a tensor of shape ne (rows of ne[0] elements; row r
// belongs to matrix r / ne[1]) from src_type at `src` (row row0 first) to dst at `out`, using the
// importance of `name` when given, with the quantizer `method`.
void convert_rows(const uint8_t* src, Type src_type, Type dst, const std::vector<int64_t>& ne, int64_t row0,
                  int64_t n_rows, void* out, const std::string& name, const ImportanceFn& importance, ThreadPool& pool,
                  QuantMethod method = QuantMethod::fast);

// Reads in_path, writes out_path atomically with converted tensors and all metadata copied
// (general.file_type updated, plan.extra_kv added). progress(done_bytes, total_bytes) may be empty.
void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizePlan& plan,
                    const std::function<void(uint64_t, uint64_t)>& progress = {}, const ImportanceFn& importance = {});

}  // namespace les
