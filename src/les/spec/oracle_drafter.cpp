#include "les/spec/oracle_drafter.h"

#include <algorithm>

#include "les/sample/sampler.h"
#include "les/util/error.h"

namespace les {

OracleDrafter::OracleDrafter(std::vector<int32_t> recording, double acceptance, int n_vocab, uint64_t seed)
    : rec_(std::move(recording)) {
  if (acceptance < 0 || acceptance > 1) throw Error(strfmt("oracle acceptance %.3f is outside [0, 1]", acceptance));
  if (n_vocab < 2) throw Error("oracle drafter: the vocabulary needs at least 2 tokens");
  Rng rng(seed);
  offered_ = rec_;
  for (int32_t& t : offered_) {
    if (rng.uniform() >= acceptance) {
      const int32_t shift = 1 + static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab - 1));
      t = (t + shift) % n_vocab;
    }
  }
}

void OracleDrafter::draft(std::span<const int32_t> history, int max_n, Draft& out) {
  out.clear();
  const size_t h = history.size();
  if (h >= rec_.size() || !std::equal(history.begin(), history.end(), rec_.begin())) return;
  const size_t n = std::min(rec_.size() - h, static_cast<size_t>(std::max(max_n, 0)));
  out.tokens.assign(offered_.begin() + static_cast<std::ptrdiff_t>(h), offered_.begin() + static_cast<std::ptrdiff_t>(h + n));
}

}  // namespace les
