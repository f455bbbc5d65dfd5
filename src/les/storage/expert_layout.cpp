#include "les/storage/expert_layout.h"

#include <algorithm>

#include "les/util/error.h"

namespace les {

namespace {
uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
}  // namespace

uint64_t ExpertLayout::part_read_span(const ExpertStack& s) const {
  // The widest aligned read over any expert of this stack: the data plus at most one alignment
  // unit of head and tail slack.
  return align_up(s.expert_bytes, align_) + (align_ > 1 ? align_ : 0);
}

ExpertLayout::ExpertLayout(const Model& model, uint64_t alignment)
    : n_layer_(model.config().n_layer), n_expert_(model.config().n_expert), align_(std::max<uint64_t>(1, alignment)) {
  layers_.resize(static_cast<size_t>(n_layer_));
  for (int l = 0; l < n_layer_; ++l) {
    const LayerWeights& L = model.weights().layers[static_cast<size_t>(l)];
    LayerLayout& ll = layers_[static_cast<size_t>(l)];
    const ExpertStack* stacks[3] = {&L.gate, &L.up, &L.down};
    uint64_t off = 0;
    for (int p = 0; p < 3; ++p) {
      LES_ASSERT(stacks[p]->present());
      ll.parts[p] = Part{stacks[p], off};
      off += part_read_span(*stacks[p]);
      ll.data_bytes += stacks[p]->expert_bytes;
    }
    slot_bytes_ = std::max(slot_bytes_, off);
  }
}

std::vector<SlotRead> ExpertLayout::reads(int layer, int e) const {
  LES_ASSERT(layer >= 0 && layer < n_layer_ && e >= 0 && e < n_expert_);
  const LayerLayout& ll = layers_[static_cast<size_t>(layer)];
  std::vector<SlotRead> out;
  out.reserve(3);
  for (const Part& p : ll.parts) {
    const uint64_t begin = p.stack->file_offset + static_cast<uint64_t>(e) * p.stack->expert_bytes;
    const uint64_t end = begin + p.stack->expert_bytes;
    const uint64_t a0 = align_down(begin, align_);
    const uint64_t a1 = align_up(end, align_);
    out.push_back(SlotRead{a0, a1 - a0, p.slot_offset});
  }
  // Adjacent parts that are contiguous both in the file and in the slot merge into one read.
  std::vector<SlotRead> merged;
  for (const SlotRead& r : out) {
    if (!merged.empty()) {
      SlotRead& m = merged.back();
      if (m.file_offset + m.length == r.file_offset && m.slot_offset + m.length == r.slot_offset) {
        m.length += r.length;
        continue;
      }
    }
    merged.push_back(r);
  }
  return merged;
}

ExpertView ExpertLayout::view(int layer, int e, const uint8_t* slot) const {
  const LayerLayout& ll = layers_[static_cast<size_t>(layer)];
  Matrix m[3];
  for (int p = 0; p < 3; ++p) {
    const Part& part = ll.parts[p];
    const uint64_t begin = part.stack->file_offset + static_cast<uint64_t>(e) * part.stack->expert_bytes;
    const uint64_t head = begin - align_down(begin, align_);
    m[p] = part.stack->at(slot + part.slot_offset + head);
  }
  return ExpertView{m[0], m[1], m[2]};
}

}  // namespace les
