// The architecture-table loader (internal to src/les/model): finds each tensor an architecture
// uses, checks its shape and type, and makes the views of ModelWeights. Per-architecture parts
// (load_<arch>_* in model_loader_<arch>.cpp) use its matrix / vec / experts helpers; every tensor
// they take is marked used, and load_all refuses a file with a tensor nothing used.
#pragma once

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "les/model/model.h"
#include "les/quant/finite.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {

enum Need { required, optional };

std::string shape_str(const std::vector<int64_t>& ne);

struct ModelLoader {
  Model& m;
  const uint8_t* base = nullptr;  // file image (may be null for experts when not mapped)
  bool map_experts = true;
  std::set<std::string> used;

  const gguf::TensorInfo* find(const std::string& name, const std::vector<int64_t>& shape, Need need) {
    const gguf::TensorInfo* t = m.gguf_.find_tensor(name);
    if (!t) {
      if (need == required) {
        throw Error(strfmt("%s: missing tensor '%s' (expected shape %s) for architecture %s", m.path_.c_str(),
                           name.c_str(), shape_str(shape).c_str(), m.cfg_.arch_str.c_str()));
      }
      return nullptr;
    }
    check_shape(name, t->ne, shape);
    used.insert(name);
    return t;
  }

  // Trailing dimensions of size 1 are equivalent.
  void check_shape(const std::string& name, const std::vector<int64_t>& have, const std::vector<int64_t>& want) const {
    std::vector<int64_t> a = have, b = want;
    while (a.size() > 1 && a.back() == 1) a.pop_back();
    while (b.size() > 1 && b.back() == 1) b.pop_back();
    if (a != b) {
      throw Error(strfmt("%s: tensor '%s' has shape %s, expected %s", m.path_.c_str(), name.c_str(),
                         shape_str(have).c_str(), shape_str(want).c_str()));
    }
  }

  // Streaming mode: where each dense tensor was read into the arena.
  std::map<std::string, size_t> arena_offset;

  const uint8_t* data_of(const gguf::TensorInfo* t) const {
    if (base) return base + m.gguf_.data_offset + t->offset;
    auto it = arena_offset.find(t->name);
    LES_ASSERT(it != arena_offset.end());
    return m.dense_arena_.data() + it->second;
  }

  Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, Need need) {
    const gguf::TensorInfo* t = find(name, {n_in, n_out}, need);
    if (!t) return {};
    if (!info(t->type).weight_type) {
      throw Error(strfmt("%s: tensor '%s' has type %s, which is not a weight type", m.path_.c_str(),
                         name.c_str(), type_name(t->type)));
    }
    m.dense_bytes_ += t->n_bytes;
    return Matrix{t->type, n_in, n_out, row_bytes(t->type, n_in), data_of(t)};
  }

  // A routed-expert stack (part: pack::gate/up/down of layer il): the ffn_*_exps tensor `name` of
  // an original GGUF, or that part of the rows of blk.il.ffn_experts_packed in a packed file.
  ExpertStack experts(int il, int part, const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert,
                      Need need) {
    if (m.pack_) return packed_experts(il, part, name, n_in, n_out, n_expert);
    const gguf::TensorInfo* t = find(name, {n_in, n_out, n_expert}, need);
    if (!t) return {};
    if (!info(t->type).weight_type) {
      throw Error(strfmt("%s: tensor '%s' has type %s, which is not a weight type", m.path_.c_str(),
                         name.c_str(), type_name(t->type)));
    }
    ExpertStack s;
    s.type = t->type;
    s.n_in = n_in;
    s.n_out = n_out;
    s.n_expert = n_expert;
    s.row_bytes = row_bytes(t->type, n_in);
    s.expert_bytes = s.row_bytes * static_cast<size_t>(n_out);
    s.expert_stride = s.expert_bytes;
    s.file_offset = m.gguf_.data_offset + t->offset;
    s.data = map_experts ? data_of(t) : nullptr;  // streaming: bytes come from an expert store
    m.expert_bytes_ += t->n_bytes;
    return s;
  }

  // Packed file: the recorded name, type and shape of the part must be what the architecture
  // table expects; the stack strides over the packed rows.
  ExpertStack packed_experts(int il, int part, const std::string& name, int64_t n_in, int64_t n_out,
                             int64_t n_expert) {
    const pack::PackedLayer* pl = m.pack_->layer(il);
    if (!pl) {
      throw Error(strfmt("%s: packed model has no experts for layer %d (missing tensor '%s' holding '%s') for "
                         "architecture %s", m.path_.c_str(), il, pack::packed_tensor_name(il).c_str(), name.c_str(),
                         m.cfg_.arch_str.c_str()));
    }
    const pack::PackedPart& pp = pl->parts[part];
    if (pp.tensor != name) {
      throw Error(strfmt("%s: packed layer %d: %s part is '%s', expected '%s'", m.path_.c_str(), il,
                         pack::part_name(part), pp.tensor.c_str(), name.c_str()));
    }
    check_shape(name + " (packed in " + pack::packed_tensor_name(il) + ")", pp.ne, {n_in, n_out, n_expert});
    ExpertStack s;
    s.type = pp.type;
    s.n_in = n_in;
    s.n_out = n_out;
    s.n_expert = n_expert;
    s.row_bytes = row_bytes(pp.type, n_in);
    s.expert_bytes = s.row_bytes * static_cast<size_t>(n_out);
    LES_ASSERT(s.expert_bytes == pp.expert_bytes);  // read_pack_info computed it from the same shape
    s.expert_stride = pl->stride;
    s.file_offset = pl->file_offset + pp.offset;
    s.data = map_experts ? base + s.file_offset : nullptr;
    used.insert(pack::packed_tensor_name(il));
    m.expert_bytes_ += s.expert_bytes * static_cast<uint64_t>(n_expert);
    return s;
  }

  // Dense FFN as a single expert used with weight 1.
  ExpertStack dense_as_expert(const std::string& name, int64_t n_in, int64_t n_out) {
    const gguf::TensorInfo* t = find(name, {n_in, n_out}, required);
    ExpertStack s;
    s.type = t->type;
    s.n_in = n_in;
    s.n_out = n_out;
    s.n_expert = 1;
    s.row_bytes = row_bytes(t->type, n_in);
    s.expert_bytes = s.row_bytes * static_cast<size_t>(n_out);
    s.expert_stride = s.expert_bytes;
    s.file_offset = m.gguf_.data_offset + t->offset;
    s.data = data_of(t);
    m.dense_bytes_ += t->n_bytes;
    return s;
  }

  Vec vec(const std::string& name, int64_t n, Need need) { return vec(name, std::vector<int64_t>{n}, need); }

  // A float tensor of any shape, flattened (F16/BF16 converted to F32).
  Vec vec(const std::string& name, const std::vector<int64_t>& shape, Need need) {
    const gguf::TensorInfo* t = find(name, shape, need);
    if (!t) return {};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    m.dense_bytes_ += t->n_bytes;
    const uint8_t* p = data_of(t);
    // Norms and biases are small: a NaN or infinity in one is refused here (matrices: les verify).
    if (const auto nf = find_nonfinite(t->type, p, n)) {
      throw Error(strfmt("%s: tensor '%s': %s", m.path_.c_str(), name.c_str(), describe_nonfinite(t->type, *nf).c_str()));
    }
    if (t->type == Type::F32) return Vec{reinterpret_cast<const float*>(p), n};
    std::vector<float> out(static_cast<size_t>(n));
    if (t->type == Type::F16 || t->type == Type::BF16) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[static_cast<size_t>(i)] = t->type == Type::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
    } else {
      throw Error(strfmt("%s: tensor '%s' has type %s; vectors must be F32, F16 or BF16", m.path_.c_str(),
                         name.c_str(), type_name(t->type)));
    }
    m.owned_.push_back(std::move(out));
    return Vec{m.owned_.back().data(), n};
  }

  // qwen35moe: the mixer (Gated DeltaNet or gated attention) of trunk layer il (qwen3next's
  // attention layers too).
  void load_qwen35moe_mixer(int il, LayerWeights& L) {
    const ModelConfig& c = m.cfg_;
    const int64_t E = c.n_embd;
    const std::string b = "blk." + std::to_string(il) + ".";
    if (m.gguf_.find_tensor(b + "nextn.eh_proj.weight")) {
      throw Error(strfmt("%s: block %d is an MTP (NextN) block but is counted as a trunk layer: the key "
                         "%s.nextn_predict_layers is missing or too small", m.path_.c_str(), il, c.arch_str.c_str()));
    }
    if (c.is_recurrent(il)) {
      const int64_t nv = c.ssm_n_v_heads, vd = c.ssm_value_dim(), cd = c.ssm_conv_dim();
      L.ssm_qkv = matrix(b + "attn_qkv.weight", E, cd, required);
      L.ssm_z = matrix(b + "attn_gate.weight", E, vd, required);
      L.ssm_beta = matrix(b + "ssm_beta.weight", E, nv, required);
      L.ssm_alpha = matrix(b + "ssm_alpha.weight", E, nv, required);
      L.ssm_conv1d = vec(b + "ssm_conv1d.weight", std::vector<int64_t>{c.ssm_d_conv, cd}, required);
      L.ssm_dt_bias = vec(b + "ssm_dt.bias", nv, required);
      L.ssm_a = vec(b + "ssm_a", nv, required);
      L.ssm_norm = vec(b + "ssm_norm.weight", c.ssm_d_state, required);
      L.ssm_out = matrix(b + "ssm_out.weight", vd, E, required);
    } else {
      const int64_t hd = c.head_dim_k;
      L.wq = matrix(b + "attn_q.weight", E, 2 * c.n_q(), required);  // [q_h | gate_h] per head
      L.wk = matrix(b + "attn_k.weight", E, c.n_kv_k(), required);
      L.wv = matrix(b + "attn_v.weight", E, c.n_kv_v(), required);
      L.wo = matrix(b + "attn_output.weight", c.n_head * c.head_dim_v, E, required);
      L.q_norm = vec(b + "attn_q_norm.weight", hd, required);
      L.k_norm = vec(b + "attn_k_norm.weight", hd, required);
    }
  }

  // The MTP (NextN) block after the trunk (qwen35moe, qwen3next, glm4moe): loaded as the draft
  // head; it never runs in the main pass. Its attention is the architecture's (gated attention, or
  // glm4moe's standard attention); its routed experts are expert layer n_layer: mapped when
  // resident, streamed through the expert cache otherwise (ExpertLayout gives them a layer of their
  // own). Its own embedding, head norm and LM head are optional (else the trunk's). Defined in
  // model_loader.cpp.
  void load_mtp_block();

  // Router, routed experts and (optional) gated shared expert of layer il.
  void load_moe(int il, LayerWeights& L) {
    const ModelConfig& c = m.cfg_;
    const int64_t E = c.n_embd;
    const std::string b = "blk." + std::to_string(il) + ".";
    L.router = matrix(b + "ffn_gate_inp.weight", E, c.n_expert, required);
    L.gate = experts(il, pack::gate, b + "ffn_gate_exps.weight", E, c.n_ff_exp, c.n_expert, required);
    L.up = experts(il, pack::up, b + "ffn_up_exps.weight", E, c.n_ff_exp, c.n_expert, required);
    L.down = experts(il, pack::down, b + "ffn_down_exps.weight", c.n_ff_exp, E, c.n_expert, required);
    if (c.arch == Arch::deepseek2 || c.arch == Arch::glm4moe) {  // llama.cpp requires it for glm4moe
      L.exp_probs_b = vec(b + "exp_probs_b.bias", c.n_expert, c.arch == Arch::glm4moe ? required : optional);
    }
    if (c.arch == Arch::gpt_oss) {
      L.router_bias = vec(b + "ffn_gate_inp.bias", c.n_expert, required);
      L.gate_exps_b = vec(b + "ffn_gate_exps.bias", std::vector<int64_t>{c.n_ff_exp, c.n_expert}, required);
      L.up_exps_b = vec(b + "ffn_up_exps.bias", std::vector<int64_t>{c.n_ff_exp, c.n_expert}, required);
      L.down_exps_b = vec(b + "ffn_down_exps.bias", std::vector<int64_t>{E, c.n_expert}, required);
    }
    if (c.n_ff_shexp > 0) {
      if (c.shared_expert_gate) {
        const gguf::TensorInfo* t = find(b + "ffn_gate_inp_shexp.weight", {E}, required);
        L.shexp_gate_inp = Matrix{t->type, E, 1, row_bytes(t->type, E), data_of(t)};
        m.dense_bytes_ += t->n_bytes;
      }
      L.shexp_gate = matrix(b + "ffn_gate_shexp.weight", E, c.n_ff_shexp, required);
      L.shexp_up = matrix(b + "ffn_up_shexp.weight", E, c.n_ff_shexp, required);
      L.shexp_down = matrix(b + "ffn_down_shexp.weight", c.n_ff_shexp, E, required);
    }
  }

  // Standard attention of block il: attn_q/k/v (biases optional), attn_output, its bias when
  // with_out_bias (as out_bias_need says; otherwise not in the table, so a file's is refused as
  // unused), and q/k norms as the config's qk_norm says. Defined in model_loader.cpp.
  void load_standard_attention(int il, LayerWeights& L, bool with_out_bias, Need out_bias_need = optional);

  // Per-architecture parts (arch_<arch>.cpp).
  void load_deepseek2_attention(int il, LayerWeights& L);
  void load_glm4moe_attention(int il, LayerWeights& L);
  void load_gpt_oss_attention(int il, LayerWeights& L);
  void load_qwen3next_mixer(int il, LayerWeights& L);

  // Loads every table entry of the model's architecture; refuses unused tensors.
  void load_all();
};

}  // namespace les
