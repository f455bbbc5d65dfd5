#include "les/storage/expert_layout.h"

#include <algorithm>

#include "les/util/error.h"
#include "les/util/hash.h"

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
    : n_layer_(model.config().n_layer + (model.weights().mtp.runnable() ? 1 : 0)),
      n_expert_(model.config().n_expert),
      align_(std::max<uint64_t>(1, alignment)) {
  layers_.resize(static_cast<size_t>(n_layer_));
  const pack::PackInfo* packed = model.packed();
  has_checksums_ = packed != nullptr && n_layer_ > 0;
  for (int l = 0; l < n_layer_; ++l) {
    const LayerWeights& L = model.expert_layer(l);
    LayerLayout& ll = layers_[static_cast<size_t>(l)];
    if (!L.gate.present()) continue;  // a dense lead layer: nothing to stream (slot_bytes 0)
    ll.has_experts = true;
    const ExpertStack* stacks[3] = {&L.gate, &L.up, &L.down};
    uint64_t first = UINT64_MAX, end = 0;
    bool same_stride = true;
    for (int p = 0; p < 3; ++p) {
      LES_ASSERT(stacks[p]->present());
      ll.data_bytes += stacks[p]->expert_bytes;
      first = std::min<uint64_t>(first, stacks[p]->file_offset);
      end = std::max<uint64_t>(end, stacks[p]->file_offset + stacks[p]->expert_bytes);
      same_stride = same_stride && stacks[p]->expert_stride == stacks[0]->expert_stride;
    }
    // One extent: the three stacks step together and expert e's three matrices lie inside
    // [first + e * stride, first + e * stride + span) with span <= stride (a packed row).
    ll.one_extent = same_stride && stacks[0]->expert_stride > 0 && end - first <= stacks[0]->expert_stride;
    uint64_t slot = 0;
    if (ll.one_extent) {
      ll.first = first;
      ll.stride = stacks[0]->expert_stride;
      ll.span = end - first;
      for (int p = 0; p < 3; ++p) ll.parts[p] = Part{stacks[p], stacks[p]->file_offset - first};
      const bool aligned = first % align_ == 0 && ll.stride % align_ == 0;
      slot = align_up(ll.span, align_) + (aligned || align_ == 1 ? 0 : align_);
    } else {
      for (int p = 0; p < 3; ++p) {
        ll.parts[p] = Part{stacks[p], slot};
        slot += part_read_span(*stacks[p]);
      }
    }
    ll.slot_bytes = slot;
    slot_bytes_ = std::max(slot_bytes_, slot);
    // Checksums cover gate+up+down back to back from the extent's first byte.
    const pack::PackedLayer* pl = packed ? packed->layer(l) : nullptr;
    if (pl && ll.one_extent && L.gate.file_offset == first && ll.span == ll.data_bytes &&
        static_cast<int64_t>(pl->checksums.size()) == L.gate.n_expert) {
      ll.checksums = &pl->checksums;
    } else {
      has_checksums_ = false;
    }
  }
}

std::vector<SlotRead> ExpertLayout::reads(int layer, int e) const {
  LES_ASSERT(layer >= 0 && layer < n_layer_ && e >= 0 && e < n_expert_);
  const LayerLayout& ll = layers_[static_cast<size_t>(layer)];
  LES_ASSERT(ll.has_experts);
  if (ll.one_extent) {
    const uint64_t begin = extent_start(ll, e);
    const uint64_t a0 = align_down(begin, align_);
    return {SlotRead{a0, align_up(begin + ll.span, align_) - a0, 0}};
  }
  std::vector<SlotRead> out;
  out.reserve(3);
  for (const Part& p : ll.parts) {
    const uint64_t begin = p.stack->expert_file_offset(e);
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
  if (ll.one_extent) {
    const uint64_t begin = extent_start(ll, e);
    const uint8_t* data = slot + (begin - align_down(begin, align_));
    for (int p = 0; p < 3; ++p) m[p] = ll.parts[p].stack->at(data + ll.parts[p].slot_offset);
    return ExpertView{m[0], m[1], m[2]};
  }
  for (int p = 0; p < 3; ++p) {
    const Part& part = ll.parts[p];
    const uint64_t begin = part.stack->expert_file_offset(e);
    const uint64_t head = begin - align_down(begin, align_);
    m[p] = part.stack->at(slot + part.slot_offset + head);
  }
  return ExpertView{m[0], m[1], m[2]};
}

bool ExpertLayout::verify(int layer, int e, const uint8_t* slot) const {
  LES_ASSERT(has_checksums_ && layer >= 0 && layer < n_layer_ && e >= 0 && e < n_expert_);
  const LayerLayout& ll = layers_[static_cast<size_t>(layer)];
  const uint64_t begin = extent_start(ll, e);
  const uint8_t* data = slot + (begin - align_down(begin, align_));
  return hash64(data, static_cast<size_t>(ll.data_bytes)) == (*ll.checksums)[static_cast<size_t>(e)];
}

}  // namespace les
