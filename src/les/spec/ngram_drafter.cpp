#include "les/spec/ngram_drafter.h"

#include <algorithm>

#include "les/util/error.h"

namespace les {

NgramDrafter::NgramDrafter(int n_min, int n_max) : n_min_(n_min), n_max_(n_max) {
  if (n_min < 1 || n_max < n_min) throw Error(strfmt("ngram drafter: need 1 <= n_min <= n_max (got %d, %d)", n_min, n_max));
}

void NgramDrafter::draft(std::span<const int32_t> history, int max_n, Draft& out) {
  out.clear();
  const int64_t h = static_cast<int64_t>(history.size());
  for (int n = std::min<int64_t>(n_max_, h - 1); n >= n_min_; --n) {
    const int32_t* pat = history.data() + (h - n);
    // latest earlier occurrence: start positions s < h - n, scanning backwards
    for (int64_t s = h - n - 1; s >= 0; --s) {
      if (!std::equal(pat, pat + n, history.data() + s)) continue;
      const int64_t from = s + n;  // the tokens that followed it
      const int64_t avail = h - from;
      const int64_t take = std::min<int64_t>(max_n, avail);
      out.tokens.assign(history.begin() + from, history.begin() + from + take);
      return;
    }
  }
}

}  // namespace les
