#include "les/pack/pack_format.h"

#include <algorithm>
#include <charconv>

#include "les/util/error.h"

namespace les::pack {

namespace {

using ull = unsigned long long;

// Typed access to the pack keys with the file and key in every message.
struct Keys {
  const gguf::File& f;
  const std::string& path;

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw Error(strfmt("%s: packed model: key '%s': %s", path.c_str(), key.c_str(), msg.c_str()));
  }
  const gguf::Value& get(const std::string& key) const {
    const gguf::Value* v = f.find(key);
    if (!v) fail(key, "missing (the pack metadata is incomplete; pack the source again with les pack)");
    return *v;
  }
  const gguf::Value& typed(const std::string& key, gguf::ValueType t) const {
    const gguf::Value& v = get(key);
    if (v.type != t) {
      fail(key, strfmt("has type %s, expected %s", gguf::value_type_name(v.type), gguf::value_type_name(t)));
    }
    return v;
  }
  uint64_t u64(const std::string& key) const { return typed(key, gguf::ValueType::UINT64).u64; }
  uint32_t u32(const std::string& key) const {
    return static_cast<uint32_t>(typed(key, gguf::ValueType::UINT32).u64);
  }
  const std::string& str(const std::string& key) const { return typed(key, gguf::ValueType::STRING).str; }
  const std::vector<gguf::Value>& array(const std::string& key, gguf::ValueType elem) const {
    const gguf::Value& v = typed(key, gguf::ValueType::ARRAY);
    if (v.elem_type != elem) {
      fail(key, strfmt("is an array of %s, expected an array of %s", gguf::value_type_name(v.elem_type),
                       gguf::value_type_name(elem)));
    }
    return v.arr;
  }
};

// Parses the decimal layer number of "blk.N.<rest>"; -1 if the name does not have that form.
int layer_of(std::string_view name, std::string_view rest) {
  if (name.substr(0, 4) != "blk.") return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4 || name.substr(dot + 1) != rest) return -1;
  int n = -1;
  const auto r = std::from_chars(name.data() + 4, name.data() + dot, n);
  if (r.ec != std::errc() || r.ptr != name.data() + dot || n < 0) return -1;
  return n;
}

}  // namespace

const char* part_name(int part) {
  static const char* kNames[kParts] = {"gate", "up", "down"};
  LES_ASSERT(part >= 0 && part < kParts);
  return kNames[part];
}

std::string packed_tensor_name(int layer) { return "blk." + std::to_string(layer) + ".ffn_experts_packed"; }

bool is_packed_tensor_name(std::string_view name) { return layer_of(name, "ffn_experts_packed") >= 0; }

std::string source_tensor_name(int layer, int part) {
  return "blk." + std::to_string(layer) + ".ffn_" + part_name(part) + "_exps.weight";
}

int source_tensor_layer(std::string_view name, int* part) {
  for (int p = 0; p < kParts; ++p) {
    const int il = layer_of(name, std::string("ffn_") + part_name(p) + "_exps.weight");
    if (il >= 0) {
      *part = p;
      return il;
    }
  }
  return -1;
}

std::string layer_key(int layer, std::string_view field) {
  return "les.pack.blk." + std::to_string(layer) + "." + std::string(field);
}

const PackedLayer* PackInfo::layer(int il) const {
  auto it = std::lower_bound(layers.begin(), layers.end(), il,
                             [](const PackedLayer& l, int x) { return l.layer < x; });
  return it != layers.end() && it->layer == il ? &*it : nullptr;
}

bool is_packed(const gguf::File& f) { return f.find(kKeyVersion) != nullptr; }

PackInfo read_pack_info(const gguf::File& f, const std::string& path) {
  const Keys k{f, path};
  PackInfo info;
  info.version = k.u32(kKeyVersion);
  if (info.version != kFormatVersion) {
    throw Error(strfmt("%s: packed format version %u is not supported (this build reads version %u); pack the "
                       "source again with this les",
                       path.c_str(), info.version, kFormatVersion));
  }
  if (f.alignment != kAlignment) {
    throw Error(strfmt("%s: packed model: general.alignment is %llu, expected %llu", path.c_str(), ull(f.alignment),
                       ull(kAlignment)));
  }
  if (k.str(kKeyChecksum) != kChecksumName) {
    k.fail(kKeyChecksum, strfmt("checksum '%s' is not supported (expected %s)", k.str(kKeyChecksum).c_str(),
                                kChecksumName));
  }
  info.source_name = k.str(kKeySourceName);
  info.source_size = k.u64(kKeySourceSize);
  info.source_header_hash = k.u64(kKeySourceHeaderHash);

  const auto& layer_ids = k.array(kKeyLayers, gguf::ValueType::INT32);
  if (layer_ids.empty()) k.fail(kKeyLayers, "lists no layer");
  for (size_t i = 0; i < layer_ids.size(); ++i) {
    const int64_t il = layer_ids[i].i64;
    if (il < 0 || (i > 0 && il <= info.layers.back().layer)) {
      k.fail(kKeyLayers, strfmt("entry %zu (%lld) is negative or not ascending", i, static_cast<long long>(il)));
    }
    PackedLayer pl;
    pl.layer = static_cast<int>(il);
    const std::string tname = packed_tensor_name(pl.layer);
    const gguf::TensorInfo* t = f.find_tensor(tname);
    if (!t) {
      throw Error(strfmt("%s: packed model: layer %d is listed in %s but tensor '%s' is missing", path.c_str(),
                         pl.layer, kKeyLayers, tname.c_str()));
    }
    pl.stride = k.u64(layer_key(pl.layer, "stride"));
    if (t->type != Type::I8 || t->ne.size() != 2 || t->ne[0] < 0 || static_cast<uint64_t>(t->ne[0]) != pl.stride ||
        t->ne[1] < 1) {
      std::string shape;
      for (int64_t d : t->ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw Error(strfmt("%s: packed model: tensor '%s' is %s [%s], expected i8 [%llu, n_expert]", path.c_str(),
                         tname.c_str(), type_name(t->type), shape.c_str(), ull(pl.stride)));
    }
    if (pl.stride == 0 || pl.stride % kAlignment != 0) {
      throw Error(strfmt("%s: packed model: layer %d: row stride %llu is not a positive multiple of %llu",
                         path.c_str(), pl.layer, ull(pl.stride), ull(kAlignment)));
    }
    pl.n_expert = t->ne[1];
    pl.file_offset = f.data_offset + t->offset;
    if (pl.file_offset % kAlignment != 0) {
      throw Error(strfmt("%s: packed model: tensor '%s' starts at file offset %llu, not a multiple of %llu",
                         path.c_str(), tname.c_str(), ull(pl.file_offset), ull(kAlignment)));
    }
    uint64_t next = 0;  // parts must follow each other: gate at 0, up after gate, down after up
    for (int p = 0; p < kParts; ++p) {
      PackedPart& pp = pl.parts[p];
      const std::string field = part_name(p);
      pp.tensor = k.str(layer_key(pl.layer, field + ".name"));
      if (pp.tensor != source_tensor_name(pl.layer, p)) {
        k.fail(layer_key(pl.layer, field + ".name"),
               strfmt("is '%s', expected '%s'", pp.tensor.c_str(), source_tensor_name(pl.layer, p).c_str()));
      }
      const std::string type_key = layer_key(pl.layer, field + ".type");
      const uint32_t tid = k.u32(type_key);
      const auto ti = type_info(tid);
      if (!ti || !ti->weight_type) k.fail(type_key, strfmt("type id %u is not a known weight type", tid));
      pp.type = static_cast<Type>(tid);
      const std::string shape_key = layer_key(pl.layer, field + ".shape");
      const auto& shape = k.array(shape_key, gguf::ValueType::UINT64);
      if (shape.size() != 3) k.fail(shape_key, strfmt("has %zu dimensions, expected 3", shape.size()));
      for (const auto& d : shape) {
        if (d.u64 == 0 || d.u64 > (uint64_t(1) << 32)) k.fail(shape_key, strfmt("dimension %llu out of range", ull(d.u64)));
        pp.ne.push_back(static_cast<int64_t>(d.u64));
      }
      if (pp.ne[2] != pl.n_expert) {
        k.fail(shape_key, strfmt("has %lld experts, tensor '%s' holds %lld rows", static_cast<long long>(pp.ne[2]),
                                 tname.c_str(), static_cast<long long>(pl.n_expert)));
      }
      if (pp.ne[0] % ti->block_size != 0) {
        k.fail(shape_key, strfmt("row length %lld is not a multiple of %s's block size %lld",
                                 static_cast<long long>(pp.ne[0]), ti->name, static_cast<long long>(ti->block_size)));
      }
      uint64_t row = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(pp.ne[0] / ti->block_size), ti->block_bytes, &row) ||
          __builtin_mul_overflow(row, static_cast<uint64_t>(pp.ne[1]), &pp.expert_bytes) ||
          pp.expert_bytes > pl.stride) {
        k.fail(shape_key, strfmt("one expert's matrix does not fit in the row of %llu bytes", ull(pl.stride)));
      }
      const std::string off_key = layer_key(pl.layer, field + ".offset");
      pp.offset = k.u64(off_key);
      if (pp.offset != next) {
        k.fail(off_key, strfmt("is %llu, expected %llu (gate, up and down follow each other in a row)", ull(pp.offset),
                               ull(next)));
      }
      next = pp.offset + pp.expert_bytes;
    }
    pl.data_bytes = next;
    if (pl.data_bytes > pl.stride) {
      throw Error(strfmt("%s: packed model: layer %d: an expert's %llu bytes do not fit in its row of %llu",
                         path.c_str(), pl.layer, ull(pl.data_bytes), ull(pl.stride)));
    }
    const std::string ck = layer_key(pl.layer, "checksums");
    const auto& sums = k.array(ck, gguf::ValueType::UINT64);
    if (static_cast<int64_t>(sums.size()) != pl.n_expert) {
      k.fail(ck, strfmt("holds %zu checksums for %lld experts", sums.size(), static_cast<long long>(pl.n_expert)));
    }
    pl.checksums.reserve(sums.size());
    for (const auto& s : sums) pl.checksums.push_back(s.u64);
    info.layers.push_back(std::move(pl));
  }
  for (const auto& t : f.tensors) {
    if (is_packed_tensor_name(t.name) && !info.layer(layer_of(t.name, "ffn_experts_packed"))) {
      throw Error(strfmt("%s: packed model: tensor '%s' is not listed in %s", path.c_str(), t.name.c_str(),
                         kKeyLayers));
    }
  }
  return info;
}

}  // namespace les::pack
