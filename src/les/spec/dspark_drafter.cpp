#include "les/spec/dspark_drafter.h"

#include <algorithm>
#include <cstring>

#include "les/model/context.h"
#include "les/util/error.h"

namespace les {

DsparkDrafter::DsparkDrafter(std::unique_ptr<DsparkModel> m) : model_(std::move(m)) {}

void DsparkDrafter::drop() {
  if (target_) target_->set_observer({});
  target_ = nullptr;
  model_.reset();
  std::vector<float>().swap(pending_);
  std::vector<float>().swap(backlog_);
  pending_rows_ = backlog_rows_ = 0;
}

void DsparkDrafter::attach(Context& target) {
  target_ = &target;
  // A new generation: forget the previous one's context (positions before the target's n_past()
  // that this drafter did not see make it propose nothing until they are gone).
  model_->rollback(0);
  backlog_rows_ = 0;
  pending_rows_ = 0;
  chunk_base_ = 0;
  in_sync_ = true;
  const int n_layer = target.model().config().n_layer;
  slot_of_layer_.assign(static_cast<size_t>(n_layer) + 1, -1);
  const auto& tl = model_->target_layers();
  for (size_t s = 0; s < tl.size(); ++s) {
    if (tl[s] == 0) slot_of_embd_ = static_cast<int>(s);
    else slot_of_layer_[static_cast<size_t>(tl[s] - 1)] = static_cast<int>(s);  // input of l = output of l-1
  }
  const int64_t E = target.model().config().n_embd;
  const int nf = model_->n_feat();
  // Rows arrive per forward chunk: "inp_embd" opens a chunk, "l_out" of each layer follows.
  target.set_observer([this, E, nf](int layer, const char* name, const float* data, int64_t n_tok, int64_t width) {
    int slot = -1;
    if (std::strcmp(name, "inp_embd") == 0) {
      chunk_base_ = pending_rows_;
      pending_rows_ += static_cast<int>(n_tok);
      pending_.resize(static_cast<size_t>(pending_rows_) * static_cast<size_t>(nf));
      slot = slot_of_embd_;
    } else if (layer >= 0 && std::strcmp(name, "l_out") == 0 && static_cast<size_t>(layer) < slot_of_layer_.size()) {
      slot = slot_of_layer_[static_cast<size_t>(layer)];
    }
    if (slot < 0 || width != E) return;
    for (int64_t r = 0; r < n_tok; ++r) {
      std::memcpy(pending_.data() + (static_cast<size_t>(chunk_base_ + r)) * static_cast<size_t>(nf) +
                      static_cast<size_t>(slot) * static_cast<size_t>(E),
                  data + r * E, static_cast<size_t>(E) * sizeof(float));
    }
  });
}

void DsparkDrafter::truncate(int n_pos) {
  const int injected = model_->n_injected();
  if (n_pos < injected) {
    model_->rollback(n_pos);
    backlog_rows_ = 0;
  } else {
    backlog_rows_ = std::min(backlog_rows_, n_pos - injected);
  }
}

void DsparkDrafter::on_target_eval(int pos0, int n, int n_keep, std::span<const int32_t>) {
  // The pass's own rows come first; rows after them (a recurrent model's replay) are not new.
  const int keep = std::clamp(n_keep - pos0, 0, std::min(n, pending_rows_));
  truncate(pos0);
  if (pos0 != known()) {
    in_sync_ = false;  // the target evaluated positions the drafter never saw
  } else if (in_sync_ && keep > 0) {
    // Kept rows wait in the backlog until the next draft injects them in one batch, so rounds
    // that draft nothing (plain steps chosen by the depth controller) cost only this copy.
    const size_t nf = static_cast<size_t>(model_->n_feat());
    backlog_.resize((static_cast<size_t>(backlog_rows_) + static_cast<size_t>(keep)) * nf);
    std::memcpy(backlog_.data() + static_cast<size_t>(backlog_rows_) * nf, pending_.data(),
                static_cast<size_t>(keep) * nf * sizeof(float));
    backlog_rows_ += keep;
  }
  truncate(n_keep);
  pending_rows_ = 0;
  chunk_base_ = 0;
}

void DsparkDrafter::draft(std::span<const int32_t> history, int max_n, Draft& out) {
  out.clear();
  if (!in_sync_ || !target_ || history.empty() || target_->n_past() != known()) return;
  const int n = std::min(max_n, model_->max_draft());
  if (n <= 0) return;
  if (backlog_rows_ > 0) {
    model_->inject(backlog_.data(), backlog_rows_);
    backlog_rows_ = 0;
  }
  model_->draft(history.back(), n, out.tokens, out.confidence);
}

}  // namespace les
