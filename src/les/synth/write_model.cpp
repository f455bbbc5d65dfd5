// Writing a synthetic model: metadata and tokenizer keys per architecture, then every tensor as a
// streaming fill that generates its rows in parallel directly in the target type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/quant/kernels.h"
#include "les/synth/arch_synth.h"
#include "les/synth/design.h"
#include "les/synth/random_fill.h"
#include "les/synth/synth.h"
#include "les/synth/vocab.h"
#include "les/util/error.h"
#include "les/util/thread_pool.h"

namespace les::synth {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Sets element 0 of a row of type t to v: F32 directly, other types by quantizing the first block
// again with that element changed.
void set_first_element(Type t, float v, uint8_t* row) {
  if (t == Type::F32) {
    std::memcpy(row, &v, sizeof(float));
    return;
  }
  const int64_t n = block_size(t);
  std::vector<float> x(static_cast<size_t>(n));
  dequantize_row(t, row, x.data(), n);
  x[0] = v;
  quantize_weights(QuantMethod::exact, t, x.data(), row, n, nullptr);
}

class Builder final : public TensorSink {
 public:
  Builder(const SynthSpec& s, bool with_data)
      : s_(s), d_(make_design(s)), plan_(parse_quantize_plan(s.type)),
        pool_(with_data ? std::make_shared<ThreadPool>(std::max(1, s.n_threads)) : nullptr) {}

  gguf::Writer build() {
    add_keys();
    const int64_t E = s_.n_embd, V = s_.n_vocab;
    RowEditFn embd_edit;  // a constant coordinate (deepseek2's locality): 1 in every token's embedding
    if (d_.const_coord >= 0) embd_edit = [](int64_t) { return RowEdit{1.0f, 1.0f}; };
    matrix_rows("token_embd.weight", {E, V}, SplitSigma{d_.sigma_embd, d_.sigma_embd}, embd_edit);
    for (int il = 0; il < s_.n_layer; ++il) add_layer(il);
    if (s_.n_mtp > 0 && s_.arch == Arch::glm4moe) add_glm4moe_block(*this, s_, d_, s_.n_layer);
    else if (s_.n_mtp > 0) add_mtp_block(s_.n_layer);
    std::vector<float> onorm(static_cast<size_t>(E), 1.0f);
    std::fill(onorm.begin(), onorm.begin() + d_.n_ctx_dims, d_.output_norm_ctx);
    if (d_.const_coord >= 0) onorm[static_cast<size_t>(d_.const_coord)] = 0.0f;
    vector("output_norm.weight", std::move(onorm));
    matrix("output.weight", {E, V}, d_.sigma_output);
    return std::move(w_);
  }

  uint64_t data_bytes() const { return data_bytes_; }

 private:
  void add_keys() {
    const std::string p = std::string(arch_name(s_.arch)) + ".";
    w_.add_string("general.architecture", arch_name(s_.arch));
    w_.add_string("general.name", s_.name);
    w_.add_u32("general.file_type", plan_file_type(plan_));
    w_.add_u32("general.quantization_version", 2);
    w_.add_u32(p + "block_count", static_cast<uint32_t>(s_.n_layer + s_.n_mtp));
    if (s_.n_mtp > 0) w_.add_u32(p + "nextn_predict_layers", static_cast<uint32_t>(s_.n_mtp));
    w_.add_u32(p + "context_length", static_cast<uint32_t>(s_.n_ctx));
    w_.add_u32(p + "embedding_length", static_cast<uint32_t>(s_.n_embd));
    w_.add_u32(p + "attention.head_count", static_cast<uint32_t>(s_.n_head));
    w_.add_u32(p + "attention.head_count_kv", static_cast<uint32_t>(s_.n_head_kv));
    const bool hybrid = s_.arch == Arch::qwen35moe || s_.arch == Arch::qwen3next;
    if (s_.arch == Arch::deepseek2) {
      add_deepseek2_keys(w_, s_);  // head and FFN widths, routing, YaRN
    } else {
      w_.add_u32(p + "attention.key_length", static_cast<uint32_t>(s_.head_dim));
      w_.add_u32(p + "attention.value_length", static_cast<uint32_t>(s_.head_dim));
      const bool partial_rope = hybrid || s_.arch == Arch::glm4moe;
      w_.add_u32(p + "rope.dimension_count", static_cast<uint32_t>(partial_rope ? s_.n_rot : s_.head_dim));
    }
    w_.add_f32(p + "rope.freq_base", s_.rope_freq_base);
    w_.add_f32(p + "attention.layer_norm_rms_epsilon", s_.rms_eps);
    if (d_.moe) {
      w_.add_u32(p + "expert_count", static_cast<uint32_t>(s_.n_expert));
      w_.add_u32(p + "expert_used_count", static_cast<uint32_t>(s_.n_expert_used));
      if (s_.arch == Arch::glm4moe) {
        add_glm4moe_keys(w_, s_);
      } else if (s_.arch == Arch::deepseek2) {
        // written by add_deepseek2_keys
      } else if (s_.arch == Arch::qwen3moe || s_.arch == Arch::qwen2moe || hybrid) {
        w_.add_u32(p + "feed_forward_length", static_cast<uint32_t>(s_.n_ff_exp * s_.n_expert_used));
        w_.add_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(s_.n_ff_exp));
      } else {
        w_.add_u32(p + "feed_forward_length", static_cast<uint32_t>(s_.n_ff_exp));
      }
      if (s_.arch == Arch::qwen2moe || hybrid) {
        w_.add_u32(p + "expert_shared_feed_forward_length", static_cast<uint32_t>(s_.n_ff_shexp));
      }
    } else {
      w_.add_u32(p + "feed_forward_length", static_cast<uint32_t>(s_.n_ff_exp));
    }
    if (s_.arch == Arch::qwen35moe) {
      const int half = s_.n_rot / 2;  // M-RoPE sections covering every rotated pair: t, h, w
      w_.add_i32_array(p + "rope.dimension_sections", {(half + 2) / 3, (half + 1) / 3, half / 3, 0});
    }
    if (hybrid) {
      w_.add_u32(p + "full_attention_interval", static_cast<uint32_t>(s_.full_attn_interval));
      w_.add_u32(p + "ssm.conv_kernel", static_cast<uint32_t>(s_.ssm_d_conv));
      w_.add_u32(p + "ssm.state_size", static_cast<uint32_t>(s_.ssm_d_state));
      w_.add_u32(p + "ssm.group_count", static_cast<uint32_t>(s_.ssm_n_k_heads));
      w_.add_u32(p + "ssm.time_step_rank", static_cast<uint32_t>(s_.ssm_n_v_heads));
      w_.add_u32(p + "ssm.inner_size", static_cast<uint32_t>(s_.ssm_n_v_heads * s_.ssm_d_state));
    }
    if (s_.arch == Arch::gpt_oss) add_gpt_oss_keys(w_, s_);
    add_synth_tokenizer(w_, s_.n_vocab, s_.image_tokens);
  }

  // qwen35moe / qwen3next layer: DeltaNet or gated attention mixer, post-attention norm, MoE + gated shared
  // expert. DeltaNet scales keep every projection's output rms near 1 for rms-1 inputs.
  // The MTP block il = n_layer: a gated-attention layer with MoE, plus eh_proj and its norms
  // (shared_head_norm written; embedding and head shared with the trunk).
  void add_mtp_block(int il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t E = s_.n_embd;
    add_hybrid_layer(il, d_.layers.back(), true);
    matrix(b + "nextn.eh_proj.weight", {2 * E, E}, 1.0f / std::sqrt(static_cast<float>(2 * E)));
    constant(b + "nextn.enorm.weight", E, 1.0f);
    constant(b + "nextn.hnorm.weight", E, 1.0f);
    constant(b + "nextn.shared_head_norm.weight", E, 1.0f);
  }

  void add_hybrid_layer(int il) { add_hybrid_layer(il, d_.layers[static_cast<size_t>(il)], false); }

  void add_hybrid_layer(int il, const LayerDesign& L, bool attention) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t E = s_.n_embd, hd = s_.head_dim;
    const int64_t nq = s_.n_head * hd, nkv = s_.n_head_kv * hd;
    const float in_sigma = 1.0f / std::sqrt(static_cast<float>(E));
    constant(b + "attn_norm.weight", E, 1.0f);
    if (!attention && (il + 1) % s_.full_attn_interval != 0) {
      const int64_t S = s_.ssm_d_state, nv = s_.ssm_n_v_heads;
      const int64_t vd = nv * S, cd = 2 * s_.ssm_n_k_heads * S + vd;
      matrix(b + "attn_qkv.weight", {E, cd}, in_sigma);
      matrix(b + "attn_gate.weight", {E, vd}, in_sigma);
      if (s_.arch == Arch::qwen3next) {
        matrix(b + "ssm_ba.weight", {E, 2 * nv}, in_sigma);  // [beta (r) | alpha (r)] per q/k head group
      } else {
        matrix(b + "ssm_beta.weight", {E, nv}, in_sigma);
        matrix(b + "ssm_alpha.weight", {E, nv}, in_sigma);
      }
      float_tensor(b + "ssm_conv1d.weight", {s_.ssm_d_conv, cd}, 0.5f, 0.0f);
      float_tensor(b + "ssm_dt.bias", {nv}, 0.5f, 0.0f);
      float_tensor(b + "ssm_a", {nv}, 0.2f, -1.0f);  // -exp(A_log) around -1
      constant(b + "ssm_norm.weight", S, 1.0f);
      const float o_scale = std::sqrt(static_cast<float>(nq) / static_cast<float>(vd));
      matrix(b + "ssm_out.weight", {vd, E}, SplitSigma{L.sigma_o.ctx * o_scale, L.sigma_o.tok * o_scale});
    } else {
      matrix(b + "attn_q.weight", {E, 2 * nq}, L.sigma_q);
      matrix(b + "attn_k.weight", {E, nkv}, L.sigma_k);
      matrix(b + "attn_v.weight", {E, nkv}, L.sigma_v);
      matrix(b + "attn_output.weight", {nq, E}, L.sigma_o);
      constant(b + "attn_q_norm.weight", hd, d_.qk_norm_weight);
      constant(b + "attn_k_norm.weight", hd, d_.qk_norm_weight);
    }
    constant(b + "post_attention_norm.weight", E, 1.0f);
    const int64_t F = s_.n_ff_exp, X = s_.n_expert, FS = s_.n_ff_shexp;
    router(b + "ffn_gate_inp.weight", L);
    matrix(b + "ffn_gate_exps.weight", {E, F, X}, L.sigma_gate);
    matrix(b + "ffn_up_exps.weight", {E, F, X}, L.sigma_up);
    matrix(b + "ffn_down_exps.weight", {F, E, X}, L.sigma_down);
    normal_vector(b + "ffn_gate_inp_shexp.weight", E, L.sigma_sh_inp);
    matrix(b + "ffn_gate_shexp.weight", {E, FS}, L.sigma_sh_gate);
    matrix(b + "ffn_up_shexp.weight", {E, FS}, L.sigma_sh_up);
    matrix(b + "ffn_down_shexp.weight", {FS, E}, L.sigma_sh_down);
  }

  // An F32 tensor of any shape: offset + sigma * (approximately normal values).
  void float_tensor(const std::string& name, std::vector<int64_t> ne, float sigma, float offset) override {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    fill_normal_row(sigma, tensor_key(s_.seed, name), 0, n, v.data());
    for (float& x : v) x += offset;
    count(ne, Type::F32);
    auto data = std::make_shared<std::vector<float>>(std::move(v));
    w_.add_tensor(name, std::move(ne), Type::F32, gguf::Writer::FillFn([data](void* dst, uint64_t n_bytes) {
      LES_ASSERT(n_bytes == data->size() * sizeof(float));
      std::copy(data->begin(), data->end(), static_cast<float*>(dst));
    }));
  }

  void add_layer(int il) {
    if (s_.arch == Arch::qwen35moe || s_.arch == Arch::qwen3next) return add_hybrid_layer(il);
    if (s_.arch == Arch::glm4moe) return add_glm4moe_block(*this, s_, d_, il);
    if (s_.arch == Arch::gpt_oss) return add_gpt_oss_layer(*this, s_, d_, il);
    if (s_.arch == Arch::deepseek2) return add_deepseek2_layer(*this, s_, d_, il);
    const LayerDesign& L = d_.layers[static_cast<size_t>(il)];
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t E = s_.n_embd, hd = s_.head_dim;
    const int64_t nq = s_.n_head * hd, nkv = s_.n_head_kv * hd;
    constant(b + "attn_norm.weight", E, 1.0f);
    matrix(b + "attn_q.weight", {E, nq}, L.sigma_q);
    matrix(b + "attn_k.weight", {E, nkv}, L.sigma_k);
    matrix(b + "attn_v.weight", {E, nkv}, L.sigma_v);
    if (d_.local_attention) {
      std::vector<float> head(d_.head_bias);
      for (float& x : head) x *= d_.bias_scale;
      vector(b + "attn_q.bias", tile(head, s_.n_head));
      vector(b + "attn_k.bias", tile(head, s_.n_head_kv));
    }
    matrix(b + "attn_output.weight", {nq, E}, L.sigma_o);
    if (s_.arch == Arch::qwen3moe || s_.arch == Arch::qwen3) {
      constant(b + "attn_q_norm.weight", hd, d_.qk_norm_weight);
      constant(b + "attn_k_norm.weight", hd, d_.qk_norm_weight);
    } else if (s_.arch == Arch::olmoe) {
      constant(b + "attn_q_norm.weight", nq, d_.qk_norm_weight);
      constant(b + "attn_k_norm.weight", nkv, d_.qk_norm_weight);
    }
    constant(b + "ffn_norm.weight", E, 1.0f);
    const int64_t F = s_.n_ff_exp;
    if (d_.moe) {
      const int64_t X = s_.n_expert;
      router(b + "ffn_gate_inp.weight", L);
      matrix(b + "ffn_gate_exps.weight", {E, F, X}, L.sigma_gate);
      matrix(b + "ffn_up_exps.weight", {E, F, X}, L.sigma_up);
      matrix(b + "ffn_down_exps.weight", {F, E, X}, L.sigma_down);
      if (s_.arch == Arch::qwen2moe) {
        const int64_t FS = s_.n_ff_shexp;
        normal_vector(b + "ffn_gate_inp_shexp.weight", E, L.sigma_sh_inp);
        matrix(b + "ffn_gate_shexp.weight", {E, FS}, L.sigma_sh_gate);
        matrix(b + "ffn_up_shexp.weight", {E, FS}, L.sigma_sh_up);
        matrix(b + "ffn_down_shexp.weight", {FS, E}, L.sigma_sh_down);
      }
    } else {
      matrix(b + "ffn_gate.weight", {E, F}, L.sigma_gate);
      matrix(b + "ffn_up.weight", {E, F}, L.sigma_up);
      matrix(b + "ffn_down.weight", {F, E}, L.sigma_down);
    }
  }

  static std::vector<float> tile(const std::vector<float>& v, int n) {
    std::vector<float> out;
    out.reserve(v.size() * static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out.insert(out.end(), v.begin(), v.end());
    return out;
  }

  void count(const std::vector<int64_t>& ne, Type t) {
    int64_t n_rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
    data_bytes_ += align_up(row_bytes(t, ne[0]) * static_cast<uint64_t>(n_rows), 32);
  }

  // A weight matrix (2-D or a 3-D expert stack) of i.i.d. values with element std sigma.
  void matrix(const std::string& name, std::vector<int64_t> ne, float sigma) {
    matrix(name, std::move(ne), SplitSigma{sigma, sigma});
  }

  // The same, writing into the hidden state: output rows (coordinates) r % ne[1] below
  // n_ctx_dims have std sigma.ctx, the others sigma.tok.
  void matrix(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma) override {
    matrix_rows(name, std::move(ne), sigma, {});
  }

  // The same with single rows changed by edit (may be empty).
  void matrix_rows(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma, const RowEditFn& edit) override {
    const Type t = planned_type(plan_, name, ne, Type::F32, s_.n_layer);
    count(ne, t);
    const int64_t row_len = ne[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
    const int64_t n_out = ne.size() > 1 ? ne[1] : 1;
    const int64_t split = d_.n_ctx_dims;
    const uint64_t key = tensor_key(s_.seed, name);
    auto pool = pool_;
    w_.add_tensor(name, std::move(ne), t, gguf::Writer::FillFn([=](void* dst, uint64_t n_bytes) {
      const size_t rb = row_bytes(t, row_len);
      LES_ASSERT(n_bytes == rb * static_cast<uint64_t>(n_rows));
      auto* out = static_cast<uint8_t*>(dst);
      pool->parallel_for(n_rows, 64, [&](int, int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float sg = r % n_out < split ? sigma.ctx : sigma.tok;
          const RowEdit e = edit ? edit(r) : RowEdit{};
          fill_random_row(t, sg * e.scale, key, r, row_len, out + static_cast<size_t>(r) * rb);
          if (std::isfinite(e.col0)) set_first_element(t, e.col0, out + static_cast<size_t>(r) * rb);
        }
      });
    }));
  }

  // The router [n_embd] x [n_expert], F32: element (e, j) has std gain[e] * (router.ctx for the
  // context coordinates j, router.tok for the others).
  void router(const std::string& name, const LayerDesign& L) override {
    const int64_t E = s_.n_embd, X = s_.n_expert;
    count({E, X}, Type::F32);
    const uint64_t key = tensor_key(s_.seed, name);
    const std::vector<float> gain = L.router_gain;
    const SplitSigma col = L.router;
    const int64_t split = d_.n_ctx_dims;
    w_.add_tensor(name, {E, X}, Type::F32, gguf::Writer::FillFn([=](void* dst, uint64_t n_bytes) {
      LES_ASSERT(n_bytes == static_cast<uint64_t>(E * X) * sizeof(float));
      auto* out = static_cast<float*>(dst);
      for (int64_t e = 0; e < X; ++e) {
        float* row = out + e * E;
        fill_normal_row(gain[static_cast<size_t>(e)], key, e, E, row);
        for (int64_t j = 0; j < E; ++j) row[j] *= j < split ? col.ctx : col.tok;
      }
    }));
  }

  void vector(const std::string& name, std::vector<float> v) override {
    const int64_t n = static_cast<int64_t>(v.size());
    count({n}, Type::F32);
    auto data = std::make_shared<std::vector<float>>(std::move(v));
    w_.add_tensor(name, {n}, Type::F32, gguf::Writer::FillFn([data](void* dst, uint64_t n_bytes) {
      LES_ASSERT(n_bytes == data->size() * sizeof(float));
      std::copy(data->begin(), data->end(), static_cast<float*>(dst));
    }));
  }

  void constant(const std::string& name, int64_t n, float value) {
    vector(name, std::vector<float>(static_cast<size_t>(n), value));
  }

  void normal_vector(const std::string& name, int64_t n, float sigma) {
    std::vector<float> v(static_cast<size_t>(n));
    fill_normal_row(sigma, tensor_key(s_.seed, name), 0, n, v.data());
    vector(name, std::move(v));
  }

  const SynthSpec& s_;
  Design d_;
  QuantizePlan plan_;
  std::shared_ptr<ThreadPool> pool_;
  gguf::Writer w_;
  uint64_t data_bytes_ = 0;
};

}  // namespace

uint64_t synth_file_bytes(const SynthSpec& spec) {
  validate(spec);
  Builder b(spec, false);
  const gguf::Writer w = b.build();
  return w.header_bytes() + b.data_bytes();
}

void write_synth_model(const SynthSpec& spec, const std::string& path, const ProgressFn& progress) {
  validate(spec);
  Builder b(spec, true);
  const gguf::Writer w = b.build();
  w.write(path, progress);
}

}  // namespace les::synth
