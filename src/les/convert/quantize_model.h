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

// llama.cpp's quantization recipes ("ftypes"): which tensors get more (or fewer) bits than the
// base type. The comments name each recipe's base type.
enum class Recipe {
  pure,                 // every matrix gets the base type (fallbacks aside)
  q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k,
  legacy,               // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS: base type, output Q6_K
  q2_k_s,               // Q2_K
  iq1_s, iq1_m,         // IQ1_S, IQ1_M
  iq2_xxs, iq2_xs,      // IQ2_XXS, IQ2_XS
  iq2_s, iq2_m,         // IQ2_XS (sic: llama.cpp's IQ2_S recipe), IQ2_S
  iq3_xxs,              // IQ3_XXS
  iq3_xs, iq3_s, iq3_m, // IQ3_S
  tq1_0, tq2_0,         // TQ1_0, TQ2_0
  mxfp4_moe,            // MXFP4 for expert stacks, Q8_0 for every other matrix
};

// Which weight quantizer converts rows: quantize_row_fast (the default: ~1/40 of the reference's
// time, weighted error within ~0.3% of it) or quantize_row_ref (les quantize --exact).
enum class QuantMethod { fast, exact };

// The types llama.cpp quantizes only with an importance matrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS (their recipes are refused without one; mixed precision leaves them out without one).
bool quantizer_needs_importance(Type t);

// Quantizes one row of n weights to t with the chosen quantizer (see kernels.h). For a type that
// needs importance (quantizer_needs_importance), a null importance means uniform importance.
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
  // Each attn_v / attn_qkv, ffn_down, ffn_gate and ffn_up matrix's index among the matrices of its
  // kind, counted in llama-quantize's order (by layer, then by name), and the attn_v count.
  std::map<std::string, int> kind_index;
  int n_attn_v = 0;
  bool tied_embeddings = false; // no output.weight: token_embd is the output head too
  bool has_imatrix = false;     // recipes differ slightly when an importance matrix is used
};

// Parses a target: a type name as llama.cpp spells types ("q4_K", "q8_0", "iq4_xs", "iq2_xxs", "f16":
// a pure file), a recipe name that is no type name, in any case ("q4_k_m", "Q3_K_S", "iq2_m",
// "IQ3_XS", "mxfp4_moe"), or a llama.cpp ftype name in upper case ("Q2_K", "Q6_K", "Q4_0", "IQ4_XS",
// "IQ2_XXS", "TQ1_0": that ftype's recipe).
QuantizePlan parse_quantize_plan(const std::string& name);
// Fills the plan's model facts from a GGUF file.
void prepare_plan(QuantizePlan& plan, const gguf::File& f);
// Whether llama-quantize refuses to write tensor `name` as type t under this plan without an
// importance matrix (quantizer_needs_importance, and Q2_K in a Q2_K_S file; never the token
// embedding or the output head).
bool needs_importance(const QuantizePlan& plan, const std::string& name, Type t);
// The first tensor of f (in file order) that the plan converts to a type needing an importance
// matrix, or "" for none. quantize_model refuses such a plan without one (a les::Error naming
// --imatrix).
std::string first_tensor_needing_importance(const QuantizePlan& plan, const gguf::File& f);
// llama.cpp's llama_ftype number for general.file_type.
uint32_t plan_file_type(const QuantizePlan& plan);

// The type a plan gives tensor `name` of shape ne (ne[0] = row length) in a model of n_layer
// layers; `src` is the tensor's current type (kept for vectors, routers and conv kernels).
Type planned_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& ne, Type src,
                  int n_layer);
// llama.cpp's fallback for a type whose block does not divide a row (the 256-element i-quants ->
// IQ4_NL, Q2_K/Q3_K/TQ1_0/TQ2_0 -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; F16 when that does
// not fit either, or for a type without one).
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
// Throws les::Error when a tensor needs an importance matrix (needs_importance) and `importance` is
// empty or has nothing for that tensor; a matrix of an expert stack that the importance matrix never
// saw is quantized with uniform importance (as llama-quantize does).
void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizePlan& plan,
                    const std::function<void(uint64_t, uint64_t)>& progress = {}, const ImportanceFn& importance = {});

}  // namespace les
