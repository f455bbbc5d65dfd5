// Test helpers for the corrupt-file, limit and live-truncation suites: a small synthetic model,
// a scoped temporary directory, and copies of a GGUF file with edited metadata or tensor bytes.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"
#include "test_util.h"

namespace les::test {

// A temporary directory removed (with its files) at scope exit.
struct ScopedDir {
  std::string path = temp_dir();
  ScopedDir() = default;
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  ~ScopedDir() {
    if (DIR* d = ::opendir(path.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) ::unlink((path + "/" + e->d_name).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// A small qwen3moe model (a few tens of KiB): layers x 4 experts (2 used) of width 32,
// n_embd 32, vocabulary 259, `type` weights.
inline std::string small_synth_model(const ScopedDir& d, const std::string& name, const std::string& type = "q8_0",
                                     int n_layer = 2) {
  synth::SynthSpec s = synth::shape_spec("tiny");
  s.n_layer = n_layer;
  s.n_embd = 32;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 16;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_ff_exp = 32;
  s.n_vocab = 259;
  s.n_ctx = 64;
  s.type = type;
  const std::string p = d.file(name);
  synth::write_synth_model(s, p);
  return p;
}

// A small qwen35moe spec whose rows are 256 wide everywhere (every K-quant fits): 4 layers (Gated
// DeltaNet 0 and 2, gated attention 1 and 3), 8 experts of 256 (2 used), a shared expert.
inline synth::SynthSpec qwen35_k_quant_spec(const std::string& type) {
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.n_layer = 4;
  s.full_attn_interval = 2;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_rot = 16;
  s.ssm_d_state = 64;
  s.ssm_n_k_heads = 2;
  s.ssm_n_v_heads = 4;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  s.n_vocab = 512;
  s.type = type;
  s.seed = 7;
  return s;
}

using KvList = std::vector<std::pair<std::string, gguf::Value>>;
// Edits a tensor's bytes in place: (name, type, data, n_bytes).
using TensorEdit = std::function<void(const std::string&, Type, uint8_t*, uint64_t)>;

// Copies the GGUF file `in` to `out` with its metadata passed through edit_kv and each tensor's
// bytes through edit_data (either may be empty).
inline void rewrite_model(const std::string& in, const std::string& out, const std::function<void(KvList&)>& edit_kv,
                          const TensorEdit& edit_data = {}) {
  const gguf::File f = gguf::read_file(in);
  const MappedFile map = MappedFile::open(in);
  KvList kv = f.kv;
  if (edit_kv) edit_kv(kv);
  gguf::Writer w;
  w.set_alignment(f.alignment);
  for (auto& [k, v] : kv) {
    if (k != "general.alignment") w.add(k, v);
  }
  std::vector<std::vector<uint8_t>> copies;
  copies.reserve(f.tensors.size());
  for (const auto& t : f.tensors) {
    const uint8_t* src = map.data() + f.data_offset + t.offset;
    copies.emplace_back(src, src + t.n_bytes);
    if (edit_data) edit_data(t.name, t.type, copies.back().data(), t.n_bytes);
    w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(copies.back().data()));
  }
  w.write(out);
}

inline gguf::Value* find_kv(KvList& kv, const std::string& key) {
  for (auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

// The message of the les::Error that f throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  return "";
}

inline void write_file_bytes(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

}  // namespace les::test
