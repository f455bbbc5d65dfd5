// The acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a drafted
// token d drawn from q is kept with probability min(1, p(d) / q(d)); otherwise a token is drawn
// from the normalised residual max(0, p - q). The kept or drawn token is then distributed exactly
// as p. q empty means a deterministic proposal (a point mass on d).
#pragma once

#include <cstdint>
#include <vector>

#include "les/sample/sampler.h"

namespace les {

struct AcceptResult {
  bool accepted = false;
  int32_t token = -1;  // d when accepted, else the token drawn from the residual
};

// p: the target's distribution at this position (Sampler::distribution); q: the draft's, or empty.
AcceptResult accept_or_resample(const std::vector<TokenProb>& p, int32_t d, const std::vector<TokenProb>& q, Rng& rng);

// Probability of `id` in a sparse distribution (0 when absent).
double prob_of(const std::vector<TokenProb>& dist, int32_t id);

}  // namespace les
