// Where each routed expert's bytes live in the model file, and how they are laid out in a cache
// slot. Reads are widened to the storage alignment (4 KiB for direct I/O) and land directly in the
// slot; the matrices are used in place at their offsets (no bounce buffer, no copy).
//
//  - Packed file (les pack): an expert's gate, up and down matrices lie inside one row of
//    expert_stride bytes (the three stacks share the stride and the row holds all three): ONE
//    read per expert, of the row's data rounded up to the alignment, at a 4 KiB-aligned offset.
//  - Original GGUF: an expert is three extents (its slices of the gate, up and down tensors):
//    three reads per expert (merged only where they happen to touch), each with up to one
//    alignment unit of head and tail slack. The baseline.
#pragma once

#include <cstdint>
#include <vector>

#include "les/model/expert_source.h"
#include "les/model/model.h"

namespace les {

struct ExpertExtent {
  uint64_t file_offset = 0;  // first byte wanted
  uint64_t length = 0;       // bytes wanted
};

struct SlotRead {
  uint64_t file_offset = 0;  // aligned start of the read
  uint64_t length = 0;       // aligned length
  uint64_t slot_offset = 0;  // where the read lands in the slot (aligned)
};

// The extents and slot layout of every expert of every layer.
class ExpertLayout {
 public:
  // alignment: offsets/lengths/buffers granularity of the I/O mode (1 or 4096). The model must
  // outlive the layout.
  ExpertLayout(const Model& model, uint64_t alignment);

  // Expert layers: the trunk's n_layer, plus layer n_layer for an MTP block's experts.
  int n_layer() const { return n_layer_; }
  int n_expert() const { return n_expert_; }
  uint64_t alignment() const { return align_; }
  // Bytes one cache slot needs (the largest layer's expert, padded reads included).
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Whether `layer` has routed experts (a MoE model's dense lead layers have none: their slot and
  // expert bytes are 0 and nothing of them is read).
  bool has_experts(int layer) const { return layers_[static_cast<size_t>(layer)].has_experts; }
  // Bytes a slot for one of `layer`'s experts needs (layers of different types differ).
  uint64_t slot_bytes(int layer) const { return layers_[static_cast<size_t>(layer)].slot_bytes; }
  // Bytes of the expert's own data (what must be read at minimum).
  uint64_t expert_bytes(int layer) const { return layers_[static_cast<size_t>(layer)].data_bytes; }
  // Whether every expert of `layer` is one extent (packed layout): reads() returns one read.
  bool one_extent(int layer) const { return layers_[static_cast<size_t>(layer)].one_extent; }

  // The reads that make expert (layer, e) resident in a slot.
  std::vector<SlotRead> reads(int layer, int e) const;
  // Matrices of expert (layer, e) inside a slot filled by reads().
  ExpertView view(int layer, int e, const uint8_t* slot) const;

  // Whether experts can be checked against stored checksums: a packed model whose every layer is
  // one extent with gate, up and down back to back.
  bool has_checksums() const { return has_checksums_; }
  // has_checksums() must hold. Whether the xxh3-64 of expert (layer, e)'s gate+up+down bytes in a
  // slot filled by reads() equals the checksum recorded when the file was packed.
  bool verify(int layer, int e, const uint8_t* slot) const;

 private:
  struct Part {
    const ExpertStack* stack;
    uint64_t slot_offset;  // three extents: aligned start of this part's read in the slot
                           // one extent: offset of this part from the extent's first byte
  };
  struct LayerLayout {
    Part parts[3];  // gate, up, down
    uint64_t data_bytes = 0;
    uint64_t slot_bytes = 0;
    bool one_extent = false;
    bool has_experts = false;
    uint64_t first = 0;   // one extent: file offset of expert 0's first byte (lowest part)
    uint64_t stride = 0;  // one extent: bytes between consecutive experts' extents
    uint64_t span = 0;    // one extent: bytes from the first part's start to the last part's end
    const std::vector<uint64_t>* checksums = nullptr;  // [n_expert] when the model is packed
  };
  uint64_t part_read_span(const ExpertStack& s) const;
  // One extent: file offset of expert e's first byte.
  uint64_t extent_start(const LayerLayout& ll, int e) const { return ll.first + static_cast<uint64_t>(e) * ll.stride; }
  int n_layer_ = 0, n_expert_ = 0;
  uint64_t align_ = 1;
  uint64_t slot_bytes_ = 0;
  bool has_checksums_ = false;
  std::vector<LayerLayout> layers_;
};

}  // namespace les
