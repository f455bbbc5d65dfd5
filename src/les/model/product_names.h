// The weight-matrix products of the forward pass and the GGUF tensor names of their weights, in
// the original (unpacked) layout: what an observer of product inputs (importance matrices) reports.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/config.h"

namespace les {

// The products of one block (a trunk layer or the MTP block). Routed-expert products run once per
// expert on the rows routed to it; for a dense FFN they are the plain ffn_{gate,up,down} products.
enum class Product : uint8_t {
  attn_q, attn_k, attn_v, attn_output,   // attention (gated attention: attn_q holds [q | gate])
  ssm_qkv, ssm_gate, ssm_beta, ssm_alpha, ssm_out,  // Gated DeltaNet: attn_qkv, attn_gate, ...
  router,                                // ffn_gate_inp
  ffn_gate, ffn_up, ffn_down,            // routed experts (ffn_*_exps) or the dense FFN (ffn_*)
  shexp_gate_inp, shexp_gate, shexp_up, shexp_down,  // shared expert and its scalar gate
  mtp_eh_proj,                           // MTP block only: nextn.eh_proj
  attn_q_a, attn_q_b, attn_kv_a,         // multi-head latent attention: q LoRA, attn_kv_a_mqa
  count
};
inline constexpr int kProducts = static_cast<int>(Product::count);

// The input rows of one product of the block being computed: x [n_rows][n_in] as it enters the
// product (before activation quantization). Mixers report their products through it.
using ProductTap = std::function<void(Product p, const float* x, int64_t n_rows, int64_t n_in)>;

// Tensor names of every product, built once per model. A name is empty where the block has no
// such product (e.g. DeltaNet names in an attention layer, or no shared expert).
struct ProductNames {
  std::vector<std::array<std::string, kProducts>> blocks;  // [n_layer (+ 1 MTP block)]
  std::string output;    // the LM head: "output.weight", or "token_embd.weight" when tied
  std::string mtp_head;  // the MTP head's LM head (nextn.shared_head_head or the LM head); "" without MTP
  bool moe = false;      // routed experts: ffn_* products carry an expert index
  const std::string& of(int block, Product p) const {
    return blocks[static_cast<size_t>(block)][static_cast<size_t>(p)];
  }
};

// The products each block of a model of config c runs, named after the tensors of file f (which
// decides the tied LM head and the MTP head's own tensors).
ProductNames product_names(const ModelConfig& c, const gguf::File& f);

}  // namespace les
