// Prompt lookup: the longest recent n-gram (n_max down to n_min tokens) that ends the committed
// text and occurred earlier in it proposes the tokens that followed its latest earlier
// occurrence. Costs no model evaluation; pays on text that repeats its input (code edits,
// summaries, extraction).
#pragma once

#include "les/spec/drafter.h"

namespace les {

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int n_min = 1, int n_max = 4);
  std::string name() const override { return "ngram"; }
  void draft(std::span<const int32_t> history, int max_n, Draft& out) override;

 private:
  int n_min_, n_max_;
};

}  // namespace les
