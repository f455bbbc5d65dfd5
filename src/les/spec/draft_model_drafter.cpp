#include "les/spec/draft_model_drafter.h"

#include <algorithm>

#include "les/quality/vocab_check.h"
#include "les/util/error.h"

namespace les {

namespace {
SamplerParams draft_sampling(SamplerParams s) {
  s.repeat_penalty = 1.0f;              // q only has to be a distribution the drafter drew from
  s.seed = s.seed ^ 0xD2AF7D2AF7ULL;    // its own stream: the target's draws stay the target's
  return s;
}
}  // namespace

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Model> draft, const Model& target, const ContextParams& cp,
                                     const SamplerParams& sampling)
    : model_(std::move(draft)), sampler_(draft_sampling(sampling)), greedy_(sampling.temp <= 0.0f) {
  quality::check_same_vocabulary(target, *model_);
  ctx_ = std::make_unique<Context>(*model_, cp);
}

uint64_t DraftModelDrafter::resident_bytes() const {
  return model_ ? model_->gguf().file_size + ctx_->state_bytes() : 0;
}

void DraftModelDrafter::drop() {
  ctx_.reset();  // before the model it refers to
  model_.reset();
  evaluated_.clear();
}

void DraftModelDrafter::draft(std::span<const int32_t> history, int max_n, Draft& out) {
  out.clear();
  const int h = static_cast<int>(history.size());
  if (h == 0 || max_n <= 0) return;
  const int room = ctx_->n_ctx() - h;  // the last drafted token is never evaluated
  max_n = std::min(max_n, room + 1);
  if (max_n <= 0) return;

  // Keep the shared prefix, re-evaluate from there (at least the last token, for its logits).
  int c = 0;
  const int lim = std::min<int>(static_cast<int>(evaluated_.size()), h - 1);
  while (c < lim && evaluated_[static_cast<size_t>(c)] == history[static_cast<size_t>(c)]) ++c;
  ctx_->rollback(c);
  evaluated_.resize(static_cast<size_t>(c));
  ctx_->eval(history.subspan(static_cast<size_t>(c)), false);
  evaluated_.insert(evaluated_.end(), history.begin() + c, history.end());

  const int nv = model_->config().n_vocab;
  std::vector<TokenProb> q;
  for (int i = 0; i < max_n; ++i) {
    sampler_.distribution(ctx_->last_logits(), nv, q);
    const int32_t t = sampler_.draw(q);
    out.tokens.push_back(t);
    if (!greedy_) out.probs.push_back(q);
    if (i + 1 == max_n) break;
    ctx_->eval(std::span<const int32_t>(&t, 1), false);
    evaluated_.push_back(t);
  }
}

}  // namespace les
