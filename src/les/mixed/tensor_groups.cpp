#include "les/mixed/tensor_groups.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "les/convert/quantize_model.h"
#include "les/util/error.h"

namespace les::mixed {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Group kind of a weight tensor name without its "blk.N." prefix; the second member tells whether
// the tensor is a routed-expert stack.
std::pair<std::string, bool> kind_of(const std::string& rest) {
  struct Rule { const char* name; const char* kind; bool experts; };
  static const Rule kRules[] = {
      {"attn_q.weight", "attn_q", false},
      {"attn_k.weight", "attn_k", false},
      {"attn_v.weight", "attn_v", false},
      {"attn_output.weight", "attn_output", false},
      {"attn_qkv.weight", "attn_qkv", false},      // qwen35moe DeltaNet q|k|v
      {"attn_gate.weight", "attn_gate", false},    // qwen35moe DeltaNet output gate z
      {"ssm_alpha.weight", "ssm_ab", false},
      {"ssm_beta.weight", "ssm_ab", false},
      {"ssm_ba.weight", "ssm_ab", false},          // qwen3next: beta and alpha fused
      {"ssm_in.weight", "ssm_in", false},          // qwen3next legacy: q|k|v|z fused
      {"ssm_out.weight", "ssm_out", false},
      {"attn_q_a.weight", "attn_q_a", false},        // deepseek2 MLA: q LoRA down / up
      {"attn_q_b.weight", "attn_q_b", false},
      {"attn_kv_a_mqa.weight", "attn_kv_a_mqa", false},  // latent + shared rope key
      {"attn_k_b.weight", "attn_k_b", false},        // per-head [n_head][latent][nope] (rows of nope)
      {"attn_v_b.weight", "attn_v_b", false},        // per-head [n_head][v][latent]
      {"ffn_gate_inp.weight", "router", false},
      {"ffn_gate_shexp.weight", "shexp", false},
      {"ffn_up_shexp.weight", "shexp", false},
      {"ffn_down_shexp.weight", "shexp", false},
      {"ffn_gate_exps.weight", "ffn_gate_up", true},
      {"ffn_up_exps.weight", "ffn_gate_up", true},
      {"ffn_down_exps.weight", "ffn_down", true},
      {"ffn_gate.weight", "ffn_gate_up", false},   // dense FFN
      {"ffn_up.weight", "ffn_gate_up", false},
      {"ffn_down.weight", "ffn_down", false},
      {"nextn.eh_proj.weight", "mtp_eh_proj", false},
      {"nextn.embed_tokens.weight", "mtp_embed", false},
      {"nextn.shared_head_head.weight", "mtp_head", false},
  };
  for (const Rule& r : kRules) {
    if (rest == r.name) return {r.kind, r.experts};
  }
  // Any other matrix is a group of its own, named after the tensor.
  std::string k = rest;
  if (ends_with(k, ".weight")) k.resize(k.size() - 7);
  return {k, false};
}

}  // namespace

std::string TensorGroup::id() const {
  return layer < 0 ? kind : "blk." + std::to_string(layer) + "." + kind;
}

uint64_t TensorGroup::n_elements() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.n_elements;
  return n;
}

bool TensorGroup::fits(Type t) const {
  for (const auto& gt : tensors) {
    if (gt.ne[0] % block_size(t) != 0) return false;
  }
  return true;
}

uint64_t TensorGroup::bytes(Type t) const {
  uint64_t b = 0;
  for (const auto& gt : tensors) b += row_bytes(t, gt.ne[0]) * (gt.n_elements / static_cast<uint64_t>(gt.ne[0]));
  return b;
}

uint64_t TensorGroup::src_bytes() const {
  uint64_t b = 0;
  for (const auto& gt : tensors) b += row_bytes(gt.src_type, gt.ne[0]) * (gt.n_elements / static_cast<uint64_t>(gt.ne[0]));
  return b;
}

double TensorGroup::src_bpw() const {
  double m = 0;
  for (const auto& gt : tensors) m = std::max(m, type_bpw(gt.src_type));
  return m;
}

double type_bpw(Type t) {
  const TypeInfo& ti = info(t);
  return 8.0 * static_cast<double>(ti.block_bytes) / static_cast<double>(ti.block_size);
}

std::vector<Type> weight_types() {
  std::vector<Type> v;
  for (uint32_t id = 0; id < 64; ++id) {
    auto ti = type_info(id);
    if (!ti || !ti->weight_type) continue;
    const Type t = static_cast<Type>(id);
    if (t == Type::Q8_1 || t == Type::Q8_K) continue;  // activation-only formats
    v.push_back(t);
  }
  std::stable_sort(v.begin(), v.end(), [](Type a, Type b) { return type_bpw(a) < type_bpw(b); });
  return v;
}

std::vector<TensorGroup> tensor_groups(const gguf::File& f) {
  std::vector<TensorGroup> groups;
  std::map<std::string, size_t> index;  // id -> position in groups
  for (const auto& t : f.tensors) {
    size_t dims = t.ne.size();
    while (dims > 1 && t.ne[dims - 1] == 1) --dims;
    if (dims < 2) continue;
    if (!info(t.type).weight_type) continue;
    if (!ends_with(t.name, ".weight")) continue;  // biases (gpt-oss's 2-D expert biases) keep their type
    int layer = -1;
    std::string rest = t.name;
    if (t.name.rfind("blk.", 0) == 0) {
      const size_t dot = t.name.find('.', 4);
      if (dot == std::string::npos) throw Error(strfmt("tensor '%s': malformed block name", t.name.c_str()));
      layer = std::atoi(t.name.substr(4, dot - 4).c_str());
      rest = t.name.substr(dot + 1);
    } else {
      rest = t.name;
    }
    if (read_as_floats(t.name)) continue;  // they keep their type
    auto [kind, experts] = kind_of(rest);
    if (layer < 0) kind = rest.substr(0, rest.size() - 7);  // "token_embd", "output", ...
    TensorGroup g;
    g.layer = layer;
    g.kind = kind;
    g.routed_experts = experts;
    const std::string id = g.id();
    auto it = index.find(id);
    if (it == index.end()) {
      it = index.emplace(id, groups.size()).first;
      groups.push_back(std::move(g));
    }
    TensorGroup& dst = groups[it->second];
    dst.tensors.push_back(GroupTensor{t.name, t.ne, t.type, static_cast<uint64_t>(t.n_elements())});
  }
  return groups;
}

}  // namespace les::mixed
