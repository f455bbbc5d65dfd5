#include "les/spec/mtp_drafter.h"

#include <algorithm>

#include "les/model/context.h"
#include "les/util/error.h"

namespace les {

namespace {
int32_t argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}
}  // namespace

void MtpDrafter::attach(Context& target) {
  if (!target.has_mtp()) {
    throw Error(target.model().weights().mtp.present()
                    ? "--spec mtp: the model's MTP block has no routed experts"
                    : "--spec mtp: the model has no MTP (NextN) block (nextn_predict_layers = 0)");
  }
  ctx_ = &target;
  fed_ = target.mtp_n_past();
  have_next_ = false;
  full_ = false;
  backlog_tokens_.clear();
  backlog_h_.clear();
}

void MtpDrafter::drop() {
  std::vector<int32_t>().swap(backlog_tokens_);
  std::vector<float>().swap(backlog_h_);
  have_next_ = false;
}

void MtpDrafter::on_target_eval(int pos0, int n, int n_keep, std::span<const int32_t> next_tokens) {
  ctx_->mtp_rollback(fed_);  // drop the last draft's rows
  have_next_ = false;
  const int E = ctx_->model().config().n_embd;
  const int kept = n_keep - pos0;
  // Outputs of the pass: every position (verification) or only the last (prefill).
  const int outs = ctx_->n_outputs();
  const int first = outs == n ? 0 : kept - 1;  // the first kept position with a hidden state
  if (kept <= 0 || first < 0 || outs < 1 || full_) return;
  const int rows = kept - first;
  if (fed_ + static_cast<int>(backlog_tokens_.size()) + rows > ctx_->n_ctx()) {
    full_ = true;  // the MTP cache would overflow: stop drafting rather than fail the generation
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const int out = outs == n ? first + r : outs - 1;
    backlog_tokens_.push_back(next_tokens[static_cast<size_t>(first + r)]);
    backlog_h_.insert(backlog_h_.end(), ctx_->hidden(out), ctx_->hidden(out) + E);
  }
}

void MtpDrafter::draft(std::span<const int32_t>, int max_n, Draft& out) {
  out.clear();
  if (max_n <= 0 || full_) return;
  // Feed the committed rows not fed yet in one batch (rows of one batch equal rows fed one by
  // one, bit for bit): while the depth controller keeps speculation off, the head costs nothing.
  if (!backlog_tokens_.empty()) {
    ctx_->mtp_eval(backlog_tokens_, backlog_h_.data());
    fed_ = ctx_->mtp_n_past();
    last_row_ = static_cast<int>(backlog_tokens_.size()) - 1;
    have_next_ = true;
    backlog_tokens_.clear();
    backlog_h_.clear();
  }
  if (!have_next_) return;
  const int V = ctx_->model().config().n_vocab;
  int32_t t = argmax(ctx_->mtp_logits(last_row_), V);
  out.tokens.push_back(t);
  for (int i = 1; i < max_n && ctx_->mtp_n_past() < ctx_->n_ctx(); ++i) {
    const int row = i == 1 ? last_row_ : 0;
    const std::vector<float> h(ctx_->mtp_hidden(row), ctx_->mtp_hidden(row) + ctx_->model().config().n_embd);
    ctx_->mtp_eval(std::span<const int32_t>(&t, 1), h.data());
    t = argmax(ctx_->mtp_logits(0), V);
    out.tokens.push_back(t);
  }
  have_next_ = false;  // the chain's rows replaced the last feed's outputs
}

}  // namespace les
