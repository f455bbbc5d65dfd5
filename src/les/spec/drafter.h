// Drafters propose the tokens that follow the committed text; the target verifies them in one
// batch (session/speculative.h). A drafter only proposes: what is kept is decided by the target,
// so any drafter, however wrong, leaves the output unchanged (greedy) or its distribution
// unchanged (sampling).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "les/sample/sampler.h"

namespace les {

class Context;

struct Draft {
  std::vector<int32_t> tokens;
  // Per drafted token, the distribution q it was drawn from (sampling). Empty, or an empty entry:
  // the token was chosen deterministically (q is a point mass on it).
  std::vector<std::vector<TokenProb>> probs;
  // Per drafted token, the drafter's own estimate that the target accepts it (empty: none).
  std::vector<float> confidence;
  void clear() {
    tokens.clear();
    probs.clear();
    confidence.clear();
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;

  // Called once before generation with the target context (drafters that read the target's
  // hidden states install their observers here).
  virtual void attach(Context& /*target*/) {}

  // history: every committed token (prompt and generated); the target has evaluated all but
  // the last. Proposes at most max_n (>= 1) tokens to follow it into `out` (cleared first);
  // fewer, or none, when it has nothing worth proposing.
  virtual void draft(std::span<const int32_t> history, int max_n, Draft& out) = 0;

  // The target evaluated `n` positions from pos0 (the prompt or a verification batch), the
  // tokens were committed, and the context kept its first n_keep positions (n_keep <= pos0 + n).
  // next_tokens[i] is the committed token at position pos0 + i + 1, for i < n_keep - pos0 (the
  // last one is the newest committed token, which the target has not evaluated yet). The
  // target's outputs of that pass (Context::hidden, logits) are still readable.
  virtual void on_target_eval(int /*pos0*/, int /*n*/, int /*n_keep*/, std::span<const int32_t> /*next_tokens*/) {}

  // Bytes this drafter keeps resident (weights, caches), for the memory budget.
  virtual uint64_t resident_bytes() const { return 0; }

  // Gives drafting up for good (the depth controller found it does not pay): frees the weights
  // and caches and stops reading the target (observers removed); resident_bytes() is then 0.
  // Idempotent. Returns the bytes freed. Callers must not call attach(), draft() or
  // on_target_eval() on a released drafter (the speculative loop decodes plainly instead).
  uint64_t release() {
    if (released_) return 0;
    const uint64_t b = resident_bytes();
    drop();
    released_ = true;
    return b;
  }
  bool released() const { return released_; }

 protected:
  // release()'s work for drafters that hold weights or read the target.
  virtual void drop() {}

 private:
  bool released_ = false;
};

}  // namespace les
