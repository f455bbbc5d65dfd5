// Architecture tables and loading: every tensor an architecture uses is listed with its shape;
// every shape is checked; a tensor in the file that no table entry uses is refused.
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "les/model/model_loader.h"
#include "les/quant/finite.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "les/util/clock.h"
#include "les/util/progress.h"

namespace les {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

void ModelLoader::load_all() {
  const ModelConfig& c = m.cfg_;
  ModelWeights& w = m.w_;
  const int64_t E = c.n_embd;
  w.tok_embd = matrix("token_embd.weight", E, c.n_vocab, required);
  w.output_norm = vec("output_norm.weight", E, required);
  const bool tied_ok = c.arch == Arch::qwen3moe || c.arch == Arch::llama || c.arch == Arch::qwen3 ||
                       c.arch == Arch::qwen2 || c.arch == Arch::qwen35moe || c.arch == Arch::deepseek2 ||
                       c.arch == Arch::glm4moe || c.arch == Arch::qwen3next;
  w.output = matrix("output.weight", E, c.n_vocab, tied_ok ? optional : required);
  if (!w.output.present()) w.output = w.tok_embd;
  if (c.arch == Arch::llama) w.rope_freqs = vec("rope_freqs.weight", c.n_rot / 2, optional);

  if (c.arch == Arch::llama && c.moe && m.gguf_.find_tensor("blk.0.ffn_gate.0.weight")) {
    throw Error(strfmt("%s: this Mixtral GGUF stores each expert as a separate tensor (an old "
                       "format); convert it again with a current llama.cpp to merge the experts",
                       m.path_.c_str()));
  }

  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    const std::string b = "blk." + std::to_string(il) + ".";
    L.attn_norm = vec(b + "attn_norm.weight", E, required);
    if (c.arch == Arch::qwen35moe) {
      load_qwen35moe_mixer(il, L);
      L.ffn_norm = vec(b + "post_attention_norm.weight", E, required);
      if (m.gguf_.find_tensor(b + "ffn_gate_up_exps.weight")) {
        throw Error(strfmt("%s: '%sffn_gate_up_exps.weight' (fused gate/up experts) is not supported; "
                           "convert with separate ffn_gate_exps / ffn_up_exps", m.path_.c_str(), b.c_str()));
      }
    } else if (c.arch == Arch::qwen3next) {
      load_qwen3next_mixer(il, L);
      L.ffn_norm = vec(b + "post_attention_norm.weight", E, required);
    } else if (c.arch == Arch::deepseek2) {
      load_deepseek2_attention(il, L);
      L.ffn_norm = vec(b + "ffn_norm.weight", E, required);
    } else if (c.arch == Arch::glm4moe) {
      load_glm4moe_attention(il, L);
      L.ffn_norm = vec(b + "post_attention_norm.weight", E, required);
    } else if (c.arch == Arch::gpt_oss) {
      load_gpt_oss_attention(il, L);
      L.ffn_norm = vec(b + "post_attention_norm.weight", E, required);
    } else {
      load_standard_attention(il, L, true);
      L.ffn_norm = vec(b + "ffn_norm.weight", E, required);
    }
    if (c.has_experts(il)) {
      load_moe(il, L);
    } else if (c.moe) {  // a dense lead layer
      L.ffn_gate = matrix(b + "ffn_gate.weight", E, c.n_ff_dense, required);
      L.ffn_up = matrix(b + "ffn_up.weight", E, c.n_ff_dense, required);
      L.ffn_down = matrix(b + "ffn_down.weight", c.n_ff_dense, E, required);
    } else {
      L.gate = dense_as_expert(b + "ffn_gate.weight", E, c.n_ff_exp);
      L.up = dense_as_expert(b + "ffn_up.weight", E, c.n_ff_exp);
      L.down = dense_as_expert(b + "ffn_down.weight", c.n_ff_exp, E);
    }
  }

  load_mtp_block();
  for (const auto& t : m.gguf_.tensors) {
    if (used.count(t.name)) continue;
    const auto ends_with = [&](const char* suffix) {
      const size_t n = std::strlen(suffix);
      return t.name.size() >= n && t.name.compare(t.name.size() - n, n, suffix) == 0;
    };
    if (ends_with(".scale") || ends_with(".input_scale")) {
      // llama.cpp's NVFP4 conversions may carry a second-level F32 scale per tensor (or per expert)
      // that multiplies the product; les does not apply it, and would compute the wrong model.
      throw Error(strfmt("%s: tensor '%s' is a per-tensor weight scale (NVFP4 second-level scales), which les "
                         "does not apply: this file is not supported",
                         m.path_.c_str(), t.name.c_str()));
    }
    {
      throw Error(strfmt("%s: tensor '%s' is not used by architecture %s (unexpected tensor: the file "
                         "may be of a variant we do not support)",
                         m.path_.c_str(), t.name.c_str(), c.arch_str.c_str()));
    }
  }
}

void ModelLoader::load_standard_attention(int il, LayerWeights& L, bool with_out_bias, Need out_bias_need) {
  const ModelConfig& c = m.cfg_;
  const int64_t E = c.n_embd;
  const std::string b = "blk." + std::to_string(il) + ".";
  L.wq = matrix(b + "attn_q.weight", E, c.n_q(), required);
  L.wk = matrix(b + "attn_k.weight", E, c.n_kv_k(), required);
  L.wv = matrix(b + "attn_v.weight", E, c.n_kv_v(), required);
  L.bq = vec(b + "attn_q.bias", c.n_q(), optional);
  L.bk = vec(b + "attn_k.bias", c.n_kv_k(), optional);
  L.bv = vec(b + "attn_v.bias", c.n_kv_v(), optional);
  L.wo = matrix(b + "attn_output.weight", c.n_head * c.head_dim_v, E, required);
  if (with_out_bias) L.bo = vec(b + "attn_output.bias", E, out_bias_need);
  if (c.qk_norm == QkNorm::per_head) {
    L.q_norm = vec(b + "attn_q_norm.weight", c.head_dim_k, required);
    L.k_norm = vec(b + "attn_k_norm.weight", c.head_dim_k, required);
  } else if (c.qk_norm == QkNorm::full) {
    L.q_norm = vec(b + "attn_q_norm.weight", c.n_q(), required);
    L.k_norm = vec(b + "attn_k_norm.weight", c.n_kv_k(), required);
  }
}

void ModelLoader::load_mtp_block() {
  const ModelConfig& c = m.cfg_;
  if (c.n_layer_nextn == 0) return;
  if (c.n_layer_nextn != 1) {
    throw Error(strfmt("%s: %d MTP (NextN) blocks; only one is supported (%s.nextn_predict_layers)", m.path_.c_str(),
                       c.n_layer_nextn, c.arch_str.c_str()));
  }
  const int il = c.n_layer;
  const int64_t E = c.n_embd;
  const std::string b = "blk." + std::to_string(il) + ".";
  MtpWeights& t = m.w_.mtp;
  LayerWeights& L = t.block;
  L.attn_norm = vec(b + "attn_norm.weight", E, required);
  if (c.arch == Arch::glm4moe) {
    load_glm4moe_attention(il, L);
  } else {  // gated attention: attn_q holds [q_h | gate_h] per head
    L.wq = matrix(b + "attn_q.weight", E, 2 * c.n_q(), required);
    L.wk = matrix(b + "attn_k.weight", E, c.n_kv_k(), required);
    L.wv = matrix(b + "attn_v.weight", E, c.n_kv_v(), required);
    L.wo = matrix(b + "attn_output.weight", c.n_head * c.head_dim_v, E, required);
    L.q_norm = vec(b + "attn_q_norm.weight", c.head_dim_k, required);
    L.k_norm = vec(b + "attn_k_norm.weight", c.head_dim_k, required);
  }
  L.ffn_norm = vec(b + "post_attention_norm.weight", E, required);
  load_moe(il, L);
  t.eh_proj = matrix(b + "nextn.eh_proj.weight", 2 * E, E, required);
  t.enorm = vec(b + "nextn.enorm.weight", E, required);
  t.hnorm = vec(b + "nextn.hnorm.weight", E, required);
  t.head_norm = vec(b + "nextn.shared_head_norm.weight", E, optional);
  if (!t.head_norm.present()) t.head_norm = m.w_.output_norm;
  t.embed = matrix(b + "nextn.embed_tokens.weight", E, c.n_vocab, optional);
  if (!t.embed.present()) t.embed = m.w_.tok_embd;
  t.head = matrix(b + "nextn.shared_head_head.weight", E, c.n_vocab, optional);
  if (!t.head.present()) t.head = m.w_.output;
}

bool is_routed_expert_tensor(const std::string& name) {
  return (name.size() > 12 && name.compare(name.size() - 12, 12, "_exps.weight") == 0) ||
         pack::is_packed_tensor_name(name);
}

int tensor_block(const std::string& name) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  char* end = nullptr;
  const long v = std::strtol(name.c_str() + 4, &end, 10);
  return end != name.c_str() + 4 && *end == '.' && v >= 0 && v < INT32_MAX ? static_cast<int>(v) : -1;
}

namespace {

// Reading into memory the model owns: extents cut into chunks of at most kReadChunk that
// kReaders threads claim in file order, read with direct I/O (the page cache is never filled; a
// file system that refuses O_DIRECT gets buffered reads, dropped from the page cache after). Each
// thread populates a chunk's arena pages (huge pages where the kernel grants them) just before
// reading into it, so that zeroing pages overlaps the other threads' reads, and the disk sees
// several reads in flight (one read at a time reached about half of a cloud disk's bandwidth).
constexpr size_t kReadChunk = size_t{8} << 20;
constexpr int kReaders = 4;

struct ReadChunk {
  std::string what;      // "tensor 'NAME'" or "the file image"
  uint64_t file_offset;  // of the chunk (aligned)
  size_t at;             // its position in the arena
  size_t length;         // aligned length
  uint64_t need;         // bytes of it that must be read (the aligned tail may lie past the end of the file)
};

// Appends the chunks of `need` bytes at aligned file offset `file_offset` (length `length`,
// aligned) landing at arena position `at`.
void add_chunks(std::vector<ReadChunk>& chunks, const std::string& what, uint64_t file_offset, uint64_t length, size_t at,
                uint64_t need) {
  for (uint64_t o = 0; o < need; o += kReadChunk) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kReadChunk, length - o));
    chunks.push_back(ReadChunk{what, file_offset + o, at + static_cast<size_t>(o), len, std::min<uint64_t>(len, need - o)});
  }
}

// progress: updated by the calling thread after each of its chunks with the bytes all threads
// have read (nullptr: none).
void read_chunks(const std::string& path, storage::ReadFile& file, std::vector<ReadChunk>& chunks,
                 storage::AlignedBuffer& arena, Progress* progress = nullptr) {
  std::sort(chunks.begin(), chunks.end(),
            [](const ReadChunk& x, const ReadChunk& y) { return x.file_offset < y.file_offset; });
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::string error;  // the first failure (written once, under failed's exchange)
  std::atomic<uint64_t> bytes_done{0};
  auto reader = [&](bool caller) {
    for (size_t i = next++; i < chunks.size() && !failed.load(); i = next++) {
      const ReadChunk& c = chunks[i];
      arena.populate(c.at, c.length);
      uint64_t done = 0;
      while (done < c.need) {
        const int64_t r = file.read_at(arena.data() + c.at + done, c.length - done, c.file_offset + done);
        if (r <= 0) {
          if (!failed.exchange(true)) {
            error = strfmt("%s: reading %s at offset %llu failed: %s", path.c_str(), c.what.c_str(),
                           static_cast<unsigned long long>(c.file_offset + done),
                           r == 0 ? "unexpected end of file" : std::strerror(static_cast<int>(-r)));
          }
          return;
        }
        done += static_cast<uint64_t>(r);
      }
      const uint64_t total = bytes_done += c.need;
      if (caller && progress) progress->update(total);
    }
  };
  {
    std::vector<std::thread> helpers;
    const int n = static_cast<int>(std::min<size_t>(kReaders, chunks.size()));
    for (int k = 1; k < n; ++k) helpers.emplace_back(reader, false);
    reader(true);
    for (std::thread& t : helpers) t.join();
  }
  if (failed.load()) throw Error(error);
  if (progress) progress->finish();
  // Pages no chunk touched (a file of no dense tensors: the one-block minimum) stay unpopulated:
  // nothing reads them.
  if (!file.direct()) file.drop_cache(0, file.size());
}

// Streaming mode: every non-expert tensor into one arena, each at a 4 KiB boundary plus its
// offset in its first file block; `where` gets each tensor's position.
void read_dense_tensors(const std::string& path, const gguf::File& f, storage::AlignedBuffer& arena,
                        std::map<std::string, size_t>& where) {
  std::vector<ReadChunk> chunks;
  size_t total = 0;
  for (const auto& t : f.tensors) {
    if (is_routed_expert_tensor(t.name)) continue;
    const storage::AlignedExtent ext = storage::align_extent(f.data_offset + t.offset, t.n_bytes);
    where[t.name] = total + static_cast<size_t>(ext.skip);
    add_chunks(chunks, "tensor '" + t.name + "'", ext.file_offset, ext.length, total, ext.skip + t.n_bytes);
    total += static_cast<size_t>(ext.length);
  }
  arena = storage::AlignedBuffer(std::max<size_t>(total, storage::kDirectIoAlign));
  const std::shared_ptr<storage::ReadFile> file = storage::open_direct(path);
  read_chunks(path, *file, chunks, arena);
}

// Resident mode, read: the whole file into `image` (byte k of the file at image.data() + k). The
// file must still be `file_bytes` long (the size its header was parsed at).
void read_file_image(const std::string& path, uint64_t file_bytes, storage::AlignedBuffer& image) {
  const std::shared_ptr<storage::ReadFile> file = storage::open_direct(path);
  if (file->size() != file_bytes) {
    throw Error(strfmt("%s: file changed while loading (size %llu, header saw %llu)", path.c_str(),
                       static_cast<unsigned long long>(file->size()), static_cast<unsigned long long>(file_bytes)));
  }
  const storage::AlignedExtent ext = storage::align_extent(0, file_bytes);
  image = storage::AlignedBuffer(std::max<size_t>(static_cast<size_t>(ext.length), storage::kDirectIoAlign));
  std::vector<ReadChunk> chunks;
  add_chunks(chunks, "the file image", 0, ext.length, 0, file_bytes);
  // A progress line on a terminal for files that take more than a moment.
  std::unique_ptr<Progress> progress;
  if (file_bytes >= (uint64_t{1} << 30)) progress = std::make_unique<Progress>("reading model", file_bytes);
  read_chunks(path, *file, chunks, image, progress.get());
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opt) {
  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  m->gguf_ = gguf::read_file(path);
  m->cfg_ = config_from_gguf(m->gguf_, path);
  if (pack::is_packed(m->gguf_)) m->pack_ = pack::read_pack_info(m->gguf_, path);
  ModelLoader ld{*m, nullptr, opt.map_experts, {}, {}};
  if (opt.map_experts) {
    ResidentMemory how = opt.resident;
    if (how == ResidentMemory::automatic) {
      how = choose_resident_memory(m->gguf_.file_size);
    }
    if (how == ResidentMemory::read) {
      const double t0 = now_s();
      read_file_image(path, m->gguf_.file_size, m->image_);
      m->read_seconds_ = now_s() - t0;
      ld.base = m->image_.data();
    } else {
      m->file_ = MappedFile::open(path);
      if (m->file_.size() != m->gguf_.file_size) {
        throw Error(strfmt("%s: file changed while loading (size %zu, header saw %llu)", path.c_str(),
                           m->file_.size(), static_cast<unsigned long long>(m->gguf_.file_size)));
      }
      ld.base = m->file_.data();
    }
  } else {
    read_dense_tensors(path, m->gguf_, m->dense_arena_, ld.arena_offset);
  }
  ld.load_all();
  return m;
}

uint64_t Model::expert_size(int layer) const {
  const LayerWeights& L = expert_layer(layer);
  return L.gate.expert_bytes + L.up.expert_bytes + L.down.expert_bytes;
}

const LayerWeights& Model::expert_layer(int layer) const {
  if (layer == cfg_.n_layer && w_.mtp.runnable()) return w_.mtp.block;
  return w_.layers.at(static_cast<size_t>(layer));
}

}  // namespace les
