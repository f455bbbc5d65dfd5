// The packed expert format written by `les pack` (docs/packed_format.md): a valid GGUF file whose
// routed experts are stored one contiguous, 4 KiB-aligned extent per (layer, expert).
//
//   general.alignment = 4096
//   dense tensors        unchanged, same names
//   blk.N.ffn_experts_packed   I8 [stride, n_expert]: row e = expert e's gate bytes, up bytes,
//                              down bytes (back to back), zero-padded to stride (a multiple of 4096)
//   les.pack.*           format version, source identity, per layer the original tensors' names,
//                        types, shapes and offsets inside a row, and one xxh3-64 checksum per
//                        expert over its gate+up+down bytes (padding excluded)
//
// This header names the keys and tensors and reads a packed file's pack metadata with every
// structural check; it depends only on the GGUF container and the tensor types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/types.h"

namespace les::pack {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kAlignment = 4096;  // general.alignment, row stride granularity

// Metadata keys (per-layer keys are built by layer_key()).
inline constexpr const char* kKeyVersion = "les.pack.version";               // u32
inline constexpr const char* kKeyChecksum = "les.pack.checksum";             // string "xxh3-64"
inline constexpr const char* kKeySourceName = "les.pack.source.name";        // string (basename)
inline constexpr const char* kKeySourceSize = "les.pack.source.size";        // u64 bytes
inline constexpr const char* kKeySourceHeaderHash = "les.pack.source.header_xxh3";  // u64
inline constexpr const char* kKeyLayers = "les.pack.layers";                 // i32 array
inline constexpr const char* kChecksumName = "xxh3-64";

enum Part : int { gate = 0, up = 1, down = 2 };
inline constexpr int kParts = 3;
const char* part_name(int part);  // "gate", "up", "down"

// "blk.N.ffn_experts_packed"
std::string packed_tensor_name(int layer);
// True for a name of that form.
bool is_packed_tensor_name(std::string_view name);
// "blk.N.ffn_{gate,up,down}_exps.weight": the source tensor of a part.
std::string source_tensor_name(int layer, int part);
// The layer N of a source tensor name of that form, with *part set; -1 for any other name.
int source_tensor_layer(std::string_view name, int* part);
// "les.pack.blk.N.<field>" (field e.g. "stride", "checksums", "gate.offset").
std::string layer_key(int layer, std::string_view field);

// One of a layer's three matrices as stored in each packed row.
struct PackedPart {
  std::string tensor;        // original tensor name, e.g. blk.3.ffn_up_exps.weight
  Type type = Type::F32;
  std::vector<int64_t> ne;   // original shape [n_in, n_out, n_expert]
  uint64_t offset = 0;       // byte offset of this matrix inside a row
  uint64_t expert_bytes = 0; // bytes of one expert's matrix (from type and shape)
};

struct PackedLayer {
  int layer = 0;
  int64_t n_expert = 0;
  uint64_t stride = 0;        // bytes per row (per expert), a multiple of kAlignment
  uint64_t file_offset = 0;   // absolute offset of row 0 in the file (a multiple of kAlignment)
  PackedPart parts[kParts];   // gate, up, down; adjacent: offsets 0, gate, gate + up
  uint64_t data_bytes = 0;    // gate + up + down bytes of one expert (hashed; the rest is padding)
  std::vector<uint64_t> checksums;  // [n_expert] xxh3-64 of row e's first data_bytes bytes
};

struct PackInfo {
  uint32_t version = 0;
  std::string source_name;
  uint64_t source_size = 0;
  uint64_t source_header_hash = 0;  // xxh3-64 of the source's bytes before its data section
  std::vector<PackedLayer> layers;  // ascending layer order
  // The packed layer il, or nullptr if layer il has no packed experts.
  const PackedLayer* layer(int il) const;
};

// Whether f carries pack metadata (les.pack.version present).
bool is_packed(const gguf::File& f);

// Reads and checks f's pack metadata: known version, general.alignment 4096, every key present
// with its type, one I8 [stride, n_expert] tensor per listed layer at an aligned offset, stride a
// multiple of 4096, known weight types, shapes whose n_expert matches the tensor, parts adjacent
// in gate/up/down order and inside the row, n_expert checksums, and no packed tensor that the
// metadata does not list. Throws les::Error naming `path` and the key or layer.
PackInfo read_pack_info(const gguf::File& f, const std::string& path);

}  // namespace les::pack
