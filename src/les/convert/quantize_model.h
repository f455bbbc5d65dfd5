// Converting a model's weight matrices to other tensor types (les quantize, the bundled model,
// mixed precision). Norms, biases and routers keep their types; every other matrix gets the
// type a plan assigns, with llama.cpp's fallbacks when a row length does not fit the block size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "les/quant/types.h"

namespace les {

struct QuantizePlan {
  Type base = Type::Q4_K;       // default type of weight matrices
  bool k_mix = false;           // "_M" mix: output Q6_K, attn_v/ffn_down Q6_K in some layers
  std::map<std::string, Type> overrides;  // exact tensor name -> type (mixed precision plans)
  int n_threads = 1;
};

// Parses "q4_k_m", "q4_K", "q8_0", "f16", ... into a plan (k_mix for *_m).
QuantizePlan parse_quantize_plan(const std::string& name);

// The type a plan gives tensor `name` of shape ne (ne[0] = row length) in a model of n_layer
// layers; `src` is the tensor's current type (kept for vectors and routers).
Type planned_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& ne, Type src,
                  int n_layer);

// Reads in_path, writes out_path atomically with converted tensors and all metadata copied
// (general.file_type updated). progress(done_bytes, total_bytes) may be empty.
void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizePlan& plan,
                    const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace les
