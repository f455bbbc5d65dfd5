// A separate small model with the target's vocabulary, resident, drafting token by token. Its
// context mirrors the committed text: each round it rolls back to the prefix it shares with the
// history, evaluates the rest in one batch and then proposes greedily (target greedy) or by
// sampling with the target's sampling settings, recording each draw's distribution q.
#pragma once

#include <memory>

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/spec/drafter.h"

namespace les {

class DraftModelDrafter final : public Drafter {
 public:
  // Throws les::Error when the draft's vocabulary differs from the target's.
  DraftModelDrafter(std::unique_ptr<Model> draft, const Model& target, const ContextParams& cp,
                    const SamplerParams& sampling);
  std::string name() const override { return "draft"; }
  void draft(std::span<const int32_t> history, int max_n, Draft& out) override;
  uint64_t resident_bytes() const override;

 protected:
  void drop() override;

 public:
  const Model& model() const { return *model_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Context> ctx_;
  Sampler sampler_;
  bool greedy_;
  std::vector<int32_t> evaluated_;  // the tokens in ctx_'s cache, in order
};

}  // namespace les
