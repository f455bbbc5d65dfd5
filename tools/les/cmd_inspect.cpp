#include <cstdio>
#include <map>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/model.h"
#include "les/util/error.h"

namespace les::cli {

namespace {

std::string value_str(const gguf::Value& v) {
  using VT = gguf::ValueType;
  switch (v.type) {
    case VT::STRING: return v.str.size() > 60 ? "\"" + v.str.substr(0, 57) + "...\"" : "\"" + v.str + "\"";
    case VT::ARRAY: return strfmt("[%s x %zu]", gguf::value_type_name(v.elem_type), v.arr.size());
    case VT::FLOAT32: case VT::FLOAT64: return strfmt("%g", v.f64);
    case VT::BOOL: return v.u64 ? "true" : "false";
    case VT::INT8: case VT::INT16: case VT::INT32: case VT::INT64: return std::to_string(v.i64);
    default: return std::to_string(v.u64);
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args a("inspect", "show a GGUF model's architecture, tensors, types and sizes",
         {{{"--tensors"}, false, "list every tensor"}, {{"--kv"}, false, "list every metadata key"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (a.positional().size() != 1) throw Error("expected exactly one FILE argument");
  const std::string path = a.positional()[0];
  auto m = Model::load(path, LoadOptions{.map_experts = true});
  const ModelConfig& c = m->config();
  const gguf::File& f = m->gguf();

  std::printf("file:          %s (%s, GGUF v%u, %zu tensors, %zu keys)\n", path.c_str(), human_bytes(f.file_size).c_str(),
              f.version, f.tensors.size(), f.kv.size());
  std::printf("architecture:  %s%s\n", c.arch_str.c_str(), c.arch == Arch::llama && c.moe ? " (Mixtral-style MoE)" : "");
  std::printf("layers:        %d, n_embd %d, heads %d (kv %d), head dim %d/%d, rope %s on %d dims, base %g\n",
              c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim_k, c.head_dim_v,
              c.rope_type == RopeType::neox ? "neox" : c.rope_type == RopeType::imrope ? "imrope" : "norm", c.n_rot,
              c.rope_freq_base);
  if (c.n_recurrent() > 0) {
    std::printf("mixers:        %d Gated DeltaNet (%d q/k heads, %d v heads of %d, conv %d), %d gated attention%s\n",
                c.n_recurrent(), c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_d_state, c.ssm_d_conv,
                c.n_layer - c.n_recurrent(),
                c.n_layer_nextn ? strfmt("; %d MTP block(s) not run", c.n_layer_nextn).c_str() : "");
  }
  if (c.moe) {
    std::printf("experts:       %d, %d used per token, width %d%s%s\n", c.n_expert, c.n_expert_used, c.n_ff_exp,
                c.norm_topk ? ", weights renormalised" : "",
                c.n_ff_shexp ? strfmt(", shared expert width %d", c.n_ff_shexp).c_str() : "");
  } else {
    std::printf("ffn:           dense, width %d\n", c.n_ff_exp);
  }
  std::printf("vocabulary:    %d tokens (%s)\n", c.n_vocab, f.get_string("tokenizer.ggml.model", "none").c_str());
  std::printf("context:       %d (trained)\n", c.n_ctx_train);

  std::map<std::string, uint64_t> by_type;  // bytes per tensor type
  for (const auto& t : f.tensors) by_type[type_name(t.type)] += t.n_bytes;
  std::printf("tensor types: ");
  for (const auto& [k, v] : by_type) std::printf(" %s %s;", k.c_str(), human_bytes(v).c_str());
  std::printf("\n");
  std::printf("dense bytes:   %s (resident: attention, norms, routers, embeddings, output, shared experts)\n",
              human_bytes(m->dense_bytes()).c_str());
  std::printf("expert bytes:  %s (routed experts%s)\n", human_bytes(m->expert_bytes()).c_str(),
              c.moe ? strfmt(", %s per expert of layer 0", human_bytes(m->expert_size(0)).c_str()).c_str() : "");
  if (c.moe) {
    const uint64_t active = m->dense_bytes() + static_cast<uint64_t>(c.n_expert_used) * m->expert_size(0) * c.n_layer;
    std::printf("active/token:  %s of weights read per token\n", human_bytes(active).c_str());
  }
  if (a.has("--kv")) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : f.kv) std::printf("  %-48s %s\n", k.c_str(), value_str(v).c_str());
  }
  if (a.has("--tensors")) {
    std::printf("\ntensors:\n");
    for (const auto& t : f.tensors) {
      std::string shape;
      for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.ne[i]);
      std::printf("  %-40s %-8s %-24s %12s  @%llu\n", t.name.c_str(), type_name(t.type), shape.c_str(),
                  human_bytes(t.n_bytes).c_str(), static_cast<unsigned long long>(f.data_offset + t.offset));
    }
  }
  return 0;
}

}  // namespace les::cli
