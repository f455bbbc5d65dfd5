// A benchmark and test instrument: proposes a recorded continuation (the target's own greedy
// output, recorded first) with each position corrupted, independently and for good, with
// probability 1 - acceptance (a corrupted token is another valid id). Each drafted position is
// then accepted with probability `acceptance` given the earlier ones were, which maps speculation's
// payoff against acceptance without a trained drafter. Proposes nothing once the committed text
// leaves the recording.
#pragma once

#include "les/spec/drafter.h"

namespace les {

class OracleDrafter final : public Drafter {
 public:
  // recording: prompt + continuation; acceptance in [0, 1].
  OracleDrafter(std::vector<int32_t> recording, double acceptance, int n_vocab, uint64_t seed = 1);
  std::string name() const override { return "oracle"; }
  void draft(std::span<const int32_t> history, int max_n, Draft& out) override;

 private:
  std::vector<int32_t> rec_;      // the recording
  std::vector<int32_t> offered_;  // per position: the recorded or the corrupted token
};

}  // namespace les
