// les pack: source GGUF -> packed GGUF (one 4 KiB-aligned row per expert).
#include "les/pack/pack.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>

#include "les/gguf/gguf.h"
#include "les/pack/pack_format.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/util/mapped_file.h"

namespace les::pack {

namespace {

using ull = unsigned long long;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One MoE layer of the source: its three expert tensors and the row they become.
struct SourceLayer {
  int layer = 0;
  std::array<const gguf::TensorInfo*, kParts> parts{};
  int64_t n_expert = 0;
  std::array<uint64_t, kParts> expert_bytes{};  // one expert's matrix, per part
  std::array<uint64_t, kParts> offset{};        // inside a row: back to back
  uint64_t data_bytes = 0;
  uint64_t stride = 0;
  std::vector<uint64_t> checksums;              // [n_expert], filled by the hash pass
};

// Groups the source's blk.N.ffn_{gate,up,down}_exps.weight tensors by layer and lays out rows.
std::vector<SourceLayer> plan_layers(const gguf::File& in, const std::string& path) {
  std::map<int, SourceLayer> by_layer;
  for (const auto& t : in.tensors) {
    int part = 0;
    const int il = source_tensor_layer(t.name, &part);
    if (il < 0) continue;
    SourceLayer& sl = by_layer[il];
    sl.layer = il;
    sl.parts[static_cast<size_t>(part)] = &t;
  }
  if (by_layer.empty()) {
    throw Error(strfmt("%s: no routed expert tensors (blk.N.ffn_{gate,up,down}_exps.weight): nothing to pack",
                       path.c_str()));
  }
  std::vector<SourceLayer> out;
  for (auto& [il, sl] : by_layer) {
    for (int p = 0; p < kParts; ++p) {
      const gguf::TensorInfo* t = sl.parts[static_cast<size_t>(p)];
      if (!t) {
        throw Error(strfmt("%s: layer %d has no tensor '%s'; a packed row needs gate, up and down", path.c_str(), il,
                           source_tensor_name(il, p).c_str()));
      }
      if (t->ne.size() < 2 || t->ne.size() > 3) {
        throw Error(strfmt("%s: tensor '%s' has %zu dimensions, expected [n_in, n_out, n_expert]", path.c_str(),
                           t->name.c_str(), t->ne.size()));
      }
      if (!info(t->type).weight_type) {
        throw Error(strfmt("%s: tensor '%s' has type %s, which is not a weight type", path.c_str(), t->name.c_str(),
                           type_name(t->type)));
      }
      const int64_t n_expert = t->ne.size() == 3 ? t->ne[2] : 1;
      if (n_expert < 1 || (p > 0 && n_expert != sl.n_expert)) {
        throw Error(strfmt("%s: tensor '%s' holds %lld experts, '%s' holds %lld", path.c_str(), t->name.c_str(),
                           static_cast<long long>(n_expert), sl.parts[0]->name.c_str(),
                           static_cast<long long>(sl.n_expert)));
      }
      sl.n_expert = n_expert;
      sl.expert_bytes[static_cast<size_t>(p)] = t->n_bytes / static_cast<uint64_t>(n_expert);
      sl.offset[static_cast<size_t>(p)] = sl.data_bytes;
      sl.data_bytes += sl.expert_bytes[static_cast<size_t>(p)];
    }
    sl.stride = align_up(std::max<uint64_t>(sl.data_bytes, 1), kAlignment);
    out.push_back(std::move(sl));
  }
  return out;
}

// Value of a u64 array key.
gguf::Value u64_array(const std::vector<uint64_t>& v) {
  gguf::Value a;
  a.type = gguf::ValueType::ARRAY;
  a.elem_type = gguf::ValueType::UINT64;
  a.arr.reserve(v.size());
  for (uint64_t x : v) {
    gguf::Value e;
    e.type = gguf::ValueType::UINT64;
    e.u64 = x;
    a.arr.push_back(std::move(e));
  }
  return a;
}

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using HashState = std::unique_ptr<XXH3_state_t, StateDeleter>;

// Pass 1: checksum of each expert's gate+up+down bytes, reading each source tensor in order
// (one streaming hash state per expert, so the source is read sequentially).
void hash_experts(SourceLayer& sl, const uint8_t* data_section, uint64_t& done, const std::function<void()>& report) {
  std::vector<HashState> states;
  states.reserve(static_cast<size_t>(sl.n_expert));
  for (int64_t e = 0; e < sl.n_expert; ++e) {
    states.emplace_back(XXH3_createState());
    if (!states.back() || XXH3_64bits_reset(states.back().get()) != XXH_OK) throw std::bad_alloc();
  }
  for (int p = 0; p < kParts; ++p) {
    const uint8_t* src = data_section + sl.parts[static_cast<size_t>(p)]->offset;
    const uint64_t eb = sl.expert_bytes[static_cast<size_t>(p)];
    for (int64_t e = 0; e < sl.n_expert; ++e) {
      (void)XXH3_64bits_update(states[static_cast<size_t>(e)].get(), src + static_cast<uint64_t>(e) * eb, eb);
      done += eb;
      report();
    }
  }
  sl.checksums.clear();
  for (const auto& s : states) sl.checksums.push_back(XXH3_64bits_digest(s.get()));
}

// Pass 2: rows [offset/stride, (offset+n)/stride) of the layer's packed tensor ([n_expert][stride]
// bytes), written piecewise; every row's checksum is checked against pass 1's.
void fill_rows(const SourceLayer& sl, const uint8_t* data_section, const std::string& path, uint8_t* dst,
               uint64_t offset, uint64_t n_bytes) {
  LES_ASSERT(offset % sl.stride == 0 && n_bytes % sl.stride == 0 &&
             offset + n_bytes <= sl.stride * static_cast<uint64_t>(sl.n_expert));
  const int64_t e0 = static_cast<int64_t>(offset / sl.stride);
  const int64_t e1 = e0 + static_cast<int64_t>(n_bytes / sl.stride);
  for (int p = 0; p < kParts; ++p) {
    const uint8_t* src = data_section + sl.parts[static_cast<size_t>(p)]->offset;
    const uint64_t eb = sl.expert_bytes[static_cast<size_t>(p)];
    for (int64_t e = e0; e < e1; ++e) {
      std::memcpy(dst + static_cast<uint64_t>(e - e0) * sl.stride + sl.offset[static_cast<size_t>(p)],
                  src + static_cast<uint64_t>(e) * eb, eb);
    }
  }
  for (int64_t e = e0; e < e1; ++e) {
    uint8_t* row = dst + static_cast<uint64_t>(e - e0) * sl.stride;
    std::memset(row + sl.data_bytes, 0, sl.stride - sl.data_bytes);
    if (hash64(row, sl.data_bytes) != sl.checksums[static_cast<size_t>(e)]) {
      throw Error(strfmt("%s: layer %d expert %lld changed while it was being packed (checksum differs between "
                         "the two passes)", path.c_str(), sl.layer, static_cast<long long>(e)));
    }
  }
}

}  // namespace

PackSummary pack_model(const std::string& in_path, const std::string& out_path, const PackOptions& opt,
                       const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  struct stat out_st {};
  const bool out_exists = ::stat(out_path.c_str(), &out_st) == 0;
  if (out_exists && !opt.overwrite) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out_path.c_str()));
  }
  const gguf::File in = gguf::read_file(in_path);
  if (is_packed(in)) {
    throw Error(strfmt("%s is already packed (it has %s); pack the original GGUF instead", in_path.c_str(),
                       kKeyVersion));
  }
  struct stat in_st {};
  if (out_exists && ::stat(in_path.c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
      in_st.st_ino == out_st.st_ino) {
    throw Error(strfmt("%s: the output is the source file; write the packed model to another path", out_path.c_str()));
  }
  std::vector<SourceLayer> layers = plan_layers(in, in_path);
  const MappedFile map = MappedFile::open(in_path);
  if (map.size() != in.file_size) {
    throw Error(strfmt("%s: file changed while packing (size %zu, header saw %llu)", in_path.c_str(), map.size(),
                       ull(in.file_size)));
  }
  const uint8_t* data_section = map.data() + in.data_offset;

  PackSummary sum;
  sum.source_bytes = in.file_size;
  uint64_t hash_total = 0;
  for (const auto& sl : layers) {
    ++sum.layers;
    sum.experts += sl.n_expert;
    sum.expert_bytes += sl.data_bytes * static_cast<uint64_t>(sl.n_expert);
    sum.padding_bytes += (sl.stride - sl.data_bytes) * static_cast<uint64_t>(sl.n_expert);
  }
  hash_total = sum.expert_bytes;

  // Pass 1: checksums (they go into the header, which precedes the data).
  uint64_t done = 0;
  const uint64_t total_guess = hash_total + in.file_size + sum.padding_bytes;
  const auto report_hash = [&] {
    if (progress) progress(done, total_guess);
  };
  for (auto& sl : layers) hash_experts(sl, data_section, done, report_hash);

  gguf::Writer w;
  w.set_alignment(kAlignment);
  for (const auto& [k, v] : in.kv) {
    if (k == "general.alignment") continue;  // the writer emits 4096
    w.add(k, v);
  }
  w.add_u32(kKeyVersion, kFormatVersion);
  w.add_string(kKeyChecksum, kChecksumName);
  w.add_string(kKeySourceName, basename_of(in_path));
  w.add_u64(kKeySourceSize, in.file_size);
  w.add_u64(kKeySourceHeaderHash, hash64(map.data(), static_cast<size_t>(std::min<uint64_t>(in.data_offset, map.size()))));
  std::vector<int32_t> ids;
  for (const auto& sl : layers) ids.push_back(sl.layer);
  w.add_i32_array(kKeyLayers, ids);
  for (const auto& sl : layers) {
    w.add_u64(layer_key(sl.layer, "stride"), sl.stride);
    for (int p = 0; p < kParts; ++p) {
      const gguf::TensorInfo* t = sl.parts[static_cast<size_t>(p)];
      const std::string part = part_name(p);
      w.add_string(layer_key(sl.layer, part + ".name"), t->name);
      w.add_u32(layer_key(sl.layer, part + ".type"), static_cast<uint32_t>(t->type));
      w.add(layer_key(sl.layer, part + ".shape"),
            u64_array({static_cast<uint64_t>(t->ne[0]), static_cast<uint64_t>(t->ne[1]),
                       static_cast<uint64_t>(sl.n_expert)}));
      w.add_u64(layer_key(sl.layer, part + ".offset"), sl.offset[static_cast<size_t>(p)]);
    }
    w.add(layer_key(sl.layer, "checksums"), u64_array(sl.checksums));
  }

  w.set_fill_piece(opt.write_piece);
  // Dense tensors first (contiguous for the streaming loader), then one packed tensor per layer.
  for (const auto& t : in.tensors) {
    int part = 0;
    if (source_tensor_layer(t.name, &part) >= 0) continue;
    w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(data_section + t.offset));
  }
  for (const auto& sl : layers) {
    const SourceLayer* slp = &sl;
    w.add_tensor(packed_tensor_name(sl.layer), {static_cast<int64_t>(sl.stride), sl.n_expert}, Type::I8,
                 gguf::Writer::ChunkFillFn([slp, data_section, &in_path](void* dst, uint64_t offset, uint64_t n) {
                   fill_rows(*slp, data_section, in_path, static_cast<uint8_t*>(dst), offset, n);
                 }),
                 sl.stride);
  }

  // Pass 2: write (temporary file, fsync, rename).
  w.write(out_path, [&](uint64_t d, uint64_t total) {
    if (progress) progress(hash_total + d, hash_total + total);
  });

  struct stat st {};
  if (::stat(out_path.c_str(), &st) == 0) sum.output_bytes = static_cast<uint64_t>(st.st_size);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace les::pack
