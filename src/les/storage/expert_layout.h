// Where each routed expert's bytes live in the model file, and how they are laid out in a cache
// slot. In an original GGUF an expert is three extents (its slices of the gate, up and down
// stacks); in a packed file it is one. Reads are widened to the storage alignment (4 KiB for
// direct I/O) and land directly in the slot; the matrices are used in place at their offsets.
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
  // alignment: offsets/lengths/buffers granularity of the I/O mode (1 or 4096).
  ExpertLayout(const Model& model, uint64_t alignment);

  int n_layer() const { return n_layer_; }
  int n_expert() const { return n_expert_; }
  uint64_t alignment() const { return align_; }
  // Bytes one cache slot needs (the largest layer's expert, padded reads included).
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Bytes of the expert's own data (what must be read at minimum).
  uint64_t expert_bytes(int layer) const { return layers_[static_cast<size_t>(layer)].data_bytes; }

  // The reads that make expert (layer, e) resident in a slot.
  std::vector<SlotRead> reads(int layer, int e) const;
  // Matrices of expert (layer, e) inside a slot filled by reads().
  ExpertView view(int layer, int e, const uint8_t* slot) const;

 private:
  struct Part {
    const ExpertStack* stack;
    uint64_t slot_offset;  // aligned start of this part's read in the slot
  };
  struct LayerLayout {
    Part parts[3];  // gate, up, down
    uint64_t data_bytes = 0;
  };
  uint64_t part_read_span(const ExpertStack& s) const;
  int n_layer_ = 0, n_expert_ = 0;
  uint64_t align_ = 1;
  uint64_t slot_bytes_ = 0;
  std::vector<LayerLayout> layers_;
};

}  // namespace les
