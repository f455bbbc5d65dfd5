#include "les/convert/quantize_model.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/kernels.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"
#include "les/util/thread_pool.h"

namespace les {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

// llama.cpp's fallback when the row length is not a multiple of the K-quant block.
Type fallback(Type t) {
  switch (t) {
    case Type::Q2_K: case Type::Q3_K: return Type::Q4_0;
    case Type::Q4_K: return Type::Q5_0;
    case Type::Q5_K: return Type::Q5_1;
    case Type::Q6_K: return Type::Q8_0;
    case Type::IQ4_XS: return Type::IQ4_NL;
    default: return Type::F16;
  }
}

}  // namespace

QuantizePlan parse_quantize_plan(const std::string& name) {
  std::string n = name;
  for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  QuantizePlan p;
  if (n.size() > 2 && (ends_with(n, "_m") || ends_with(n, "_s")) && n.find("_k") != std::string::npos) {
    p.k_mix = ends_with(n, "_m");
    n = n.substr(0, n.size() - 2);
  }
  auto t = parse_type(n);
  if (!t || !info(*t).weight_type || *t == Type::Q8_K || *t == Type::Q8_1) {
    throw Error(strfmt("unknown or unsupported target type '%s' (try q4_k_m, q4_K, q5_K, q6_K, q8_0, iq4_xs, iq4_nl, f16)",
                       name.c_str()));
  }
  p.base = *t;
  return p;
}

Type planned_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& ne, Type src,
                  int n_layer) {
  if (auto it = plan.overrides.find(name); it != plan.overrides.end()) {
    Type t = it->second;
    while (ne[0] % block_size(t) != 0) t = fallback(t);
    return t;
  }
  // Vectors, routers and the shared-expert gate keep their type.
  if (ne.size() < 2) return src;
  if (name.find("ffn_gate_inp") != std::string::npos) return src;
  if (name.find("ssm_conv1d") != std::string::npos) return src;  // ggml's ssm_conv reads F32 only
  Type t = plan.base;
  if (plan.k_mix) {
    const int il = layer_of(name);
    const bool more_bits = il >= 0 && (il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2);
    if (name == "output.weight") t = Type::Q6_K;
    else if ((name.find("attn_v.weight") != std::string::npos || name.find("ffn_down") != std::string::npos) && more_bits) {
      t = Type::Q6_K;
    }
  }
  while (ne[0] % block_size(t) != 0) t = fallback(t);
  return t;
}

void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizePlan& plan,
                    const std::function<void(uint64_t, uint64_t)>& progress) {
  const gguf::File in = gguf::read_file(in_path);
  const MappedFile map = MappedFile::open(in_path);
  const std::string arch = in.get_string("general.architecture", "");
  const int n_layer = static_cast<int>(in.get_int(arch + ".block_count", 0));

  gguf::Writer w;
  w.set_alignment(in.alignment);
  for (const auto& [k, v] : in.kv) {
    if (k == "general.file_type" || k == "general.alignment" || k == "general.quantization_version") continue;
    w.add(k, v);
  }
  w.add_u32("general.quantization_version", 2);

  auto pool = std::make_shared<ThreadPool>(std::max(1, plan.n_threads));
  for (const auto& t : in.tensors) {
    const Type dst = planned_type(plan, t.name, t.ne, t.type, n_layer);
    const uint8_t* src = map.data() + in.data_offset + t.offset;
    if (dst == t.type) {
      w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(src));
      continue;
    }
    const int64_t row_len = t.ne[0];
    const int64_t n_rows = t.n_elements() / row_len;
    const Type src_type = t.type;
    w.add_tensor(t.name, t.ne, dst, gguf::Writer::FillFn([=](void* out, uint64_t n_bytes) {
      const size_t in_row = row_bytes(src_type, row_len);
      const size_t out_row = row_bytes(dst, row_len);
      LES_ASSERT(n_bytes == out_row * static_cast<size_t>(n_rows));
      pool->parallel_for(n_rows, 4, [&](int, int64_t r0, int64_t r1) {
        std::vector<float> tmp(static_cast<size_t>(row_len));
        for (int64_t r = r0; r < r1; ++r) {
          dequantize_row(src_type, src + static_cast<size_t>(r) * in_row, tmp.data(), row_len);
          quantize_row_ref(dst, tmp.data(), static_cast<uint8_t*>(out) + static_cast<size_t>(r) * out_row, row_len);
        }
      });
    }));
  }
  w.write(out_path, progress);
}

}  // namespace les
