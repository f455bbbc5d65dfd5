// Writing a random-weight DSpark (dflash) drafter for a target model: the target's tokenizer keys
// copied, every tensor F32 from (seed, name).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/config.h"
#include "les/synth/random_fill.h"
#include "les/synth/synth.h"
#include "les/util/error.h"

namespace les::synth {

namespace {

struct DflashWriter {
  uint64_t seed;
  gguf::Writer w;
  std::vector<std::unique_ptr<std::vector<float>>> bufs;  // tensor data, alive until write()

  // rows x n approximately normal values of standard deviation sigma, plus `mean`.
  void tensor(const std::string& name, int64_t n, int64_t rows, float sigma, float mean = 0.0f) {
    auto buf = std::make_unique<std::vector<float>>(static_cast<size_t>(n * rows));
    const uint64_t key = tensor_key(seed, name);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = buf->data() + r * n;
      fill_normal_row(sigma, key, r, n, row);
      for (int64_t i = 0; i < n; ++i) row[i] += mean;
    }
    std::vector<int64_t> ne{n};
    if (rows > 1 || name.find("conf_proj.weight") != std::string::npos) ne.push_back(rows);
    w.add_tensor(name, ne, Type::F32, buf->data());
    bufs.push_back(std::move(buf));
  }
};

}  // namespace

void write_synth_dflash(const DflashSpec& s, const std::string& target_path, const std::string& path) {
  const gguf::File tf = gguf::read_file(target_path);
  const ModelConfig tc = config_from_gguf(tf, target_path);
  std::vector<int> layers = s.target_layers;
  if (layers.empty()) layers = {std::min(1, tc.n_layer - 1), tc.n_layer / 2, tc.n_layer - 1};
  for (int l : layers) {
    if (l < 0 || l >= tc.n_layer) throw Error(strfmt("dflash target layer %d is outside [0, %d)", l, tc.n_layer));
  }
  auto need = [](bool ok, const char* what) { if (!ok) throw Error(strfmt("dflash spec: %s", what)); };
  need(s.n_layer >= 1 && s.n_ff >= 1 && s.head_dim >= 2 && s.head_dim % 2 == 0, "layers, ff and even head_dim >= 1");
  need(s.n_head >= 1 && s.n_head_kv >= 1 && s.n_head % s.n_head_kv == 0, "heads a multiple of kv heads");
  need(s.markov_rank >= 1, "markov rank >= 1");
  need(s.block_size >= (s.sample_from_anchor ? 1 : 2), "block size >= 1 (2 without sample_from_anchor)");
  const int32_t mask = s.mask_token >= 0 ? s.mask_token : tc.n_vocab - 1;
  need(mask < tc.n_vocab, "mask token inside the vocabulary");

  const int64_t E = tc.n_embd, V = tc.n_vocab, R = s.markov_rank, hd = s.head_dim;
  const int64_t nq = s.n_head * hd, nkv = s.n_head_kv * hd, F = static_cast<int64_t>(layers.size()) * E;
  DflashWriter d{s.seed, {}, {}};
  gguf::Writer& w = d.w;
  w.add_string("general.architecture", "dflash");
  w.add_string("general.name", s.name);
  w.add_u32("general.file_type", 0);
  w.add_u32("dflash.block_count", static_cast<uint32_t>(s.n_layer));
  w.add_u32("dflash.context_length", static_cast<uint32_t>(tc.n_ctx_train > 0 ? tc.n_ctx_train : 4096));
  w.add_u32("dflash.embedding_length", static_cast<uint32_t>(E));
  w.add_u32("dflash.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.add_u32("dflash.attention.head_count", static_cast<uint32_t>(s.n_head));
  w.add_u32("dflash.attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.add_u32("dflash.attention.key_length", static_cast<uint32_t>(hd));
  w.add_u32("dflash.attention.value_length", static_cast<uint32_t>(hd));
  w.add_u32("dflash.rope.dimension_count", static_cast<uint32_t>(hd));
  w.add_f32("dflash.rope.freq_base", tc.rope_freq_base);
  w.add_f32("dflash.attention.layer_norm_rms_epsilon", tc.rms_eps);
  w.add_bool("dflash.attention.causal", s.causal);
  w.add_u32("dflash.block_size", static_cast<uint32_t>(s.block_size));
  w.add_i32_array("dflash.target_layers", layers);
  w.add_bool("dflash.sample_from_anchor", s.sample_from_anchor);
  w.add_bool("dflash.has_confidence_head", s.confidence);
  for (const auto& [key, value] : tf.kv) {
    if (key.rfind("tokenizer.", 0) == 0 && key != "tokenizer.ggml.mask_token_id") w.add(key, value);
  }
  w.add_u32("tokenizer.ggml.mask_token_id", static_cast<uint32_t>(mask));

  // Scales: unit-variance activations through every product; logits with a spread of a few units.
  const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  d.tensor("token_embd.weight", E, V, 1.0f);
  d.tensor("fc.weight", F, E, inv_sqrt(F));
  d.tensor("enc.output_norm.weight", E, 1, 0.1f, 1.0f);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    d.tensor(b + "attn_norm.weight", E, 1, 0.1f, 1.0f);
    d.tensor(b + "attn_q.weight", E, nq, inv_sqrt(E));
    d.tensor(b + "attn_k.weight", E, nkv, inv_sqrt(E));
    d.tensor(b + "attn_v.weight", E, nkv, inv_sqrt(E));
    d.tensor(b + "attn_output.weight", nq, E, inv_sqrt(nq));
    d.tensor(b + "attn_q_norm.weight", hd, 1, 0.1f, 1.0f);
    d.tensor(b + "attn_k_norm.weight", hd, 1, 0.1f, 1.0f);
    d.tensor(b + "ffn_norm.weight", E, 1, 0.1f, 1.0f);
    d.tensor(b + "ffn_gate.weight", E, s.n_ff, inv_sqrt(E));
    d.tensor(b + "ffn_up.weight", E, s.n_ff, inv_sqrt(E));
    d.tensor(b + "ffn_down.weight", s.n_ff, E, inv_sqrt(s.n_ff));
  }
  d.tensor("output_norm.weight", E, 1, 0.1f, 1.0f);
  d.tensor("output.weight", E, V, 2.0f * inv_sqrt(E));
  d.tensor("markov_w1.weight", R, V, 1.0f);
  d.tensor("markov_w2.weight", R, V, inv_sqrt(R));
  if (s.confidence) {
    d.tensor("conf_proj.weight", E + R, 1, inv_sqrt(E + R));
    d.tensor("conf_proj.bias", 1, 1, 0.5f);
  }
  w.write(path);
}

}  // namespace les::synth
